package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// toError turns anything a handler or middleware returned into a
// *sandgate.Error a client may see.
func toError(err error) *sandgate.Error {
	var se *sandgate.Error
	if errors.As(err, &se) {
		return se
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		return fromEchoError(he)
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return sandgate.Errorf(sandgate.CodeTooLarge, "body exceeds %d bytes", mbe.Limit)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return sandgate.WrapError(sandgate.CodeUnavailable, err, "the request timed out")
	}
	return sandgate.WrapError(sandgate.CodeInternal, err, "internal error")
}

func fromEchoError(he *echo.HTTPError) *sandgate.Error {
	msg := http.StatusText(he.Code)
	if s, ok := he.Message.(string); ok && s != "" {
		msg = s
	}
	msg = strings.ToLower(msg)
	switch he.Code {
	case http.StatusNotFound:
		return sandgate.Errorf(sandgate.CodeNotFound, "no such endpoint")
	case http.StatusMethodNotAllowed:
		return sandgate.Errorf(sandgate.CodeMethodNotAllowed, "method not allowed on this endpoint")
	case http.StatusRequestEntityTooLarge:
		return sandgate.Errorf(sandgate.CodeTooLarge, "request body too large")
	case http.StatusUnauthorized:
		return sandgate.Errorf(sandgate.CodeUnauthenticated, "%s", msg)
	case http.StatusForbidden:
		return sandgate.Errorf(sandgate.CodeForbidden, "%s", msg)
	case http.StatusTooManyRequests:
		return sandgate.Errorf(sandgate.CodeRateLimited, "%s", msg)
	case http.StatusServiceUnavailable:
		return sandgate.Errorf(sandgate.CodeUnavailable, "%s", msg)
	}
	if he.Code >= 400 && he.Code < 500 {
		return sandgate.Errorf(sandgate.CodeInvalidRequest, "%s", msg)
	}
	return sandgate.WrapError(sandgate.CodeInternal, he, "internal error")
}

// handleError is the gateway's one HTTPErrorHandler: it maps the error's
// code to its status and writes the error shape, with Retry-After on 429,
// 503 and 507 and WWW-Authenticate on 401. Internal causes are logged, never
// sent.
func (s edge) handleError(err error, c echo.Context) {
	corr := correlationID(c)
	if c.Response().Committed {
		if !errors.Is(err, context.Canceled) {
			s.logger(c).Warn("error after the response started", "error", err)
		}
		return
	}
	se := toError(err)
	status := api.StatusOf(se.Code)
	msg := sandgate.ErrorMessageOf(se)
	if status >= 500 && se.Code == sandgate.CodeInternal {
		msg = "internal error"
		s.logger(c).Error("internal error", "error", err)
	} else if status >= 500 {
		s.logger(c).Warn("unavailable", "code", se.Code, "error", err)
	}
	details := map[string]any{}
	for k, v := range se.Details {
		details[k] = v
	}
	if se.Field != "" {
		details["field"] = se.Field
	}
	h := c.Response().Header()
	switch status {
	case http.StatusServiceUnavailable, http.StatusTooManyRequests, http.StatusInsufficientStorage:
		h.Set("Retry-After", strconv.Itoa(int(max(1, s.cfg.RetryAfter.Seconds()))))
	case http.StatusUnauthorized:
		h.Set("WWW-Authenticate", `Bearer realm="sandgate"`)
	}
	body := api.ErrorBody{Error: api.ErrorDetail{Code: se.Code, Message: msg, CorrelationID: corr, Details: details}}
	if c.Request().Method == http.MethodHead {
		err = c.NoContent(status)
	} else {
		err = c.JSON(status, body)
	}
	if err != nil {
		s.logger(c).Warn("write error response", "error", err)
	}
}

// recoverPanics turns a panic into a clean SANDGATE-INTERNAL answer, logging
// the panic value but never sending a stack.
func (s edge) recoverPanics(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			r := recover()
			if r == nil {
				return
			}
			if r == http.ErrAbortHandler {
				panic(r)
			}
			s.logger(c).Error("panic in handler", "panic", fmt.Sprint(r))
			err = sandgate.Errorf(sandgate.CodeInternal, "internal error")
		}()
		return next(c)
	}
}

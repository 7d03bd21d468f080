package gateway

import (
	"mime"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate"
)

// requireJSON refuses a body declared as anything but JSON.
func requireJSON(c echo.Context) error {
	ct := c.Request().Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
		return sandgate.FieldError("Content-Type", "must be application/json; got %q", ct)
	}
	return nil
}

// checkQuery refuses query parameters the endpoint does not know, and
// repeated ones.
func checkQuery(c echo.Context, allowed ...string) error {
	for k, vs := range c.QueryParams() {
		known := false
		for _, a := range allowed {
			if k == a {
				known = true
				break
			}
		}
		if !known {
			return sandgate.FieldError(k, "unknown query parameter")
		}
		if len(vs) > 1 {
			return sandgate.FieldError(k, "given more than once")
		}
	}
	return nil
}

func parseRange(q url.Values) (since, until time.Time, err error) {
	parse := func(field string) (time.Time, error) {
		v := q.Get(field)
		if v == "" {
			return time.Time{}, nil
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return time.Time{}, sandgate.FieldError(field, "must be an RFC 3339 time such as 2026-01-02T15:04:05Z; got %q", v)
		}
		return t, nil
	}
	if since, err = parse("since"); err != nil {
		return
	}
	if until, err = parse("until"); err != nil {
		return
	}
	if !since.IsZero() && !until.IsZero() && until.Before(since) {
		err = sandgate.FieldError("until", "must not be before since")
	}
	return
}

func parseLimit(v string) (int, error) {
	if v == "" {
		return 100, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxPageSize {
		return 0, sandgate.FieldError("limit", "must be an integer from 1 to %d; got %q", maxPageSize, v)
	}
	return n, nil
}

// intParam reads an integer query parameter from lo to hi, def when absent.
func intParam(v, field string, lo, hi, def int) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, sandgate.FieldError(field, "must be an integer from %d to %d; got %q", lo, hi, shorten(v, 32))
	}
	return n, nil
}

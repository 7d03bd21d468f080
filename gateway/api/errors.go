package api

import (
	"net/http"
	"strings"

	"github.com/sandgate/sandgate"
)

// ErrorBody is the shape of every error answer.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the content of an error answer. Details holds "field"
// when one request field is at fault, and for SANDGATE-POLICY-DENIED the
// decision (see DecisionFromDetails).
type ErrorDetail struct {
	Code          sandgate.ErrorCode `json:"code"`
	Message       string             `json:"message"`
	CorrelationID string             `json:"correlation_id"`
	Details       map[string]any     `json:"details"`
}

// Err returns the error answer as sandgate's error type: its Code,
// Message and Details, with Field taken from details.field (and its
// "field: " prefix taken off the message, which Error puts back) and the
// answer's correlation ID in Details["correlation_id"].
func (d ErrorDetail) Err() *sandgate.Error {
	e := &sandgate.Error{Code: d.Code, Message: d.Message}
	if f, ok := d.Details["field"].(string); ok && f != "" {
		e.Field = f
		e.Message = strings.TrimPrefix(d.Message, f+": ")
	}
	if len(d.Details) > 0 || d.CorrelationID != "" {
		e.Details = make(map[string]any, len(d.Details)+1)
		for k, v := range d.Details {
			e.Details[k] = v
		}
		if d.CorrelationID != "" {
			e.Details["correlation_id"] = d.CorrelationID
		}
	}
	return e
}

// Codes are every error code the API answers with, each with its status.
var Codes = []sandgate.ErrorCode{
	sandgate.CodeInvalidRequest, sandgate.CodeUnauthenticated, sandgate.CodeForbidden, sandgate.CodePolicyDenied,
	sandgate.CodeNotFound, sandgate.CodeMethodNotAllowed, sandgate.CodeConflict, sandgate.CodeTooLarge,
	sandgate.CodePolicyInvalid, sandgate.CodeImageUnavailable, sandgate.CodeMountError, sandgate.CodeResourceLimit,
	sandgate.CodeRateLimited, sandgate.CodeContainerCreate, sandgate.CodeAuditUnavailable,
	sandgate.CodeDockerUnavailable, sandgate.CodeUnavailable, sandgate.CodeInternal, sandgate.CodeRangeNotSatisfiable,
	sandgate.CodePurged, sandgate.CodeStorageFull,
}

// StatusOf maps every error code to its one HTTP status. The sandbox codes
// answer 422 when the request named something the node cannot provide
// (image, mount, resource) and 502 when the backend failed to create the
// container. A code this table does not know is a 500.
func StatusOf(code sandgate.ErrorCode) int {
	switch code {
	case sandgate.CodeInvalidRequest:
		return http.StatusBadRequest
	case sandgate.CodeUnauthenticated:
		return http.StatusUnauthorized
	case sandgate.CodeForbidden, sandgate.CodePolicyDenied:
		return http.StatusForbidden
	case sandgate.CodeNotFound:
		return http.StatusNotFound
	case sandgate.CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case sandgate.CodeConflict:
		return http.StatusConflict
	case sandgate.CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case sandgate.CodeRangeNotSatisfiable:
		return http.StatusRequestedRangeNotSatisfiable
	case sandgate.CodePurged:
		return http.StatusGone
	case sandgate.CodePolicyInvalid, sandgate.CodeImageUnavailable, sandgate.CodeMountError, sandgate.CodeResourceLimit:
		return http.StatusUnprocessableEntity
	case sandgate.CodeRateLimited:
		return http.StatusTooManyRequests
	case sandgate.CodeAuditUnavailable, sandgate.CodeDockerUnavailable, sandgate.CodeUnavailable:
		return http.StatusServiceUnavailable
	case sandgate.CodeContainerCreate:
		return http.StatusBadGateway
	case sandgate.CodeStorageFull:
		return http.StatusInsufficientStorage
	}
	return http.StatusInternalServerError
}

// CodeForStatus is the code of an error answer that carries none, such
// as a proxy's HTML page: the code the API answers that status with, or
// SANDGATE-UNAVAILABLE for a status of the server side (5xx) and
// SANDGATE-INVALID-REQUEST for any other.
func CodeForStatus(status int) sandgate.ErrorCode {
	switch status {
	case http.StatusBadRequest:
		return sandgate.CodeInvalidRequest
	case http.StatusUnauthorized:
		return sandgate.CodeUnauthenticated
	case http.StatusForbidden:
		return sandgate.CodeForbidden
	case http.StatusNotFound:
		return sandgate.CodeNotFound
	case http.StatusMethodNotAllowed:
		return sandgate.CodeMethodNotAllowed
	case http.StatusConflict:
		return sandgate.CodeConflict
	case http.StatusRequestEntityTooLarge:
		return sandgate.CodeTooLarge
	case http.StatusTooManyRequests:
		return sandgate.CodeRateLimited
	case http.StatusRequestedRangeNotSatisfiable:
		return sandgate.CodeRangeNotSatisfiable
	case http.StatusGone:
		return sandgate.CodePurged
	case http.StatusInsufficientStorage:
		return sandgate.CodeStorageFull
	}
	if status >= 500 {
		return sandgate.CodeUnavailable
	}
	return sandgate.CodeInvalidRequest
}

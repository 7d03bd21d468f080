package sandgate

import (
	"errors"
	"fmt"
)

// ErrorCode is a stable, documented error code. Every code is prefixed
// "SANDGATE-" and maps to exactly one HTTP status in the gateway.
type ErrorCode string

// The error codes sandgate answers with. Clients may rely on them.
const (
	CodeInvalidRequest    ErrorCode = "SANDGATE-INVALID-REQUEST"
	CodeUnauthenticated   ErrorCode = "SANDGATE-UNAUTHENTICATED"
	CodeForbidden         ErrorCode = "SANDGATE-FORBIDDEN"
	CodePolicyDenied      ErrorCode = "SANDGATE-POLICY-DENIED"
	CodeNotFound          ErrorCode = "SANDGATE-NOT-FOUND"
	CodeConflict          ErrorCode = "SANDGATE-CONFLICT"
	CodeTooLarge          ErrorCode = "SANDGATE-TOO-LARGE"
	CodeRateLimited       ErrorCode = "SANDGATE-RATE-LIMITED"
	CodeAuditUnavailable  ErrorCode = "SANDGATE-AUDIT-UNAVAILABLE"
	CodeDockerUnavailable ErrorCode = "SANDGATE-DOCKER-UNAVAILABLE"
	CodePolicyInvalid     ErrorCode = "SANDGATE-POLICY-INVALID"
	CodeUnavailable       ErrorCode = "SANDGATE-UNAVAILABLE"
	CodeInternal          ErrorCode = "SANDGATE-INTERNAL"
	// CodeRangeNotSatisfiable means a Range header asked for bytes past
	// the end of a file (HTTP 416).
	CodeRangeNotSatisfiable ErrorCode = "SANDGATE-RANGE-NOT-SATISFIABLE"
	// CodePurged means what was asked for was in a month of the audit
	// trail that retention dropped, as a signed retention.applied event
	// records: it is known to be gone, not missing (HTTP 410).
	CodePurged ErrorCode = "SANDGATE-PURGED"
	// CodeStorageFull means the gateway's room for uploads in flight, all
	// principals' together, is taken: the upload was refused before a
	// byte of it was read (HTTP 507). A principal's or a team's own quota
	// is RATE-LIMITED instead.
	CodeStorageFull ErrorCode = "SANDGATE-STORAGE-FULL"

	// CodeContainerCreate means the container could not be created.
	CodeContainerCreate ErrorCode = "SANDGATE-SBX-001"
	// CodeImageUnavailable means the image is not present and may not be pulled.
	CodeImageUnavailable ErrorCode = "SANDGATE-SBX-002"
	// CodeMountError means a bind mount or volume could not be set up.
	CodeMountError ErrorCode = "SANDGATE-SBX-003"
	// CodeResourceLimit means a resource limit was refused or exceeded.
	CodeResourceLimit ErrorCode = "SANDGATE-SBX-004"
)

// CodeMethodNotAllowed means the path exists but not with the request's
// method (HTTP 405).
const CodeMethodNotAllowed ErrorCode = "SANDGATE-METHOD-NOT-ALLOWED"

// Error is sandgate's one error type. Code classifies it; Field names the
// request field at fault, when there is one; Details carries structured data
// (for a policy denial, the decision). Err is the underlying cause and is
// never shown to clients.
type Error struct {
	Code    ErrorCode
	Message string
	Field   string
	Details map[string]any
	Err     error
}

// Error implements error.
func (e *Error) Error() string {
	msg := e.Message
	if e.Field != "" {
		msg = e.Field + ": " + msg
	}
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, msg, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, msg)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with the code and a formatted message.
func Errorf(code ErrorCode, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// FieldError returns an INVALID-REQUEST error that names the field at fault.
func FieldError(field, format string, args ...any) *Error {
	return &Error{Code: CodeInvalidRequest, Field: field, Message: fmt.Sprintf(format, args...)}
}

// WrapError returns an *Error with the code and message whose cause is err.
func WrapError(code ErrorCode, err error, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Err: err}
}

// ErrorCodeOf returns the code of the first *Error in err's chain, or
// CodeInternal when there is none. It returns "" for a nil error.
func ErrorCodeOf(err error) ErrorCode {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// ErrorMessageOf returns the client-facing message of err: the message of
// its *Error (with the field), or a generic text that leaks nothing.
func ErrorMessageOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		if e.Field != "" {
			return e.Field + ": " + e.Message
		}
		return e.Message
	}
	return "internal error"
}

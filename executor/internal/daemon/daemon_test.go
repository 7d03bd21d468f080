package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
)

// Errors as the Docker client's errdefs classify them.
type (
	errNotFound    string
	errConflict    string
	errUnavailable string
	errInternal    string
	errInvalid     string
)

func (e errNotFound) Error() string    { return string(e) }
func (errNotFound) NotFound()          {}
func (e errConflict) Error() string    { return string(e) }
func (errConflict) Conflict()          {}
func (e errUnavailable) Error() string { return string(e) }
func (errUnavailable) Unavailable()    {}
func (e errInternal) Error() string    { return string(e) }
func (errInternal) System()            {}
func (e errInvalid) Error() string     { return string(e) }
func (errInvalid) InvalidParameter()   {}

// TestTransient: the classification of Docker errors.
func TestTransient(t *testing.T) {
	timeout, cancel := context.WithTimeout(context.Background(), 0)
	defer cancel()
	<-timeout.Done()
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"not found", errNotFound("x"), false},
		{"invalid", errInvalid("x"), false},
		{"conflict", errConflict("x"), false},
		{"unavailable", errUnavailable("x"), true},
		{"internal", errInternal("x"), true},
		{"wrapped unavailable", fmt.Errorf("create: %w", errUnavailable("x")), true},
		{"per-attempt deadline", context.DeadlineExceeded, true},
		{"connection refused", &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, true},
		{"plain error", errors.New("something"), false},
		{"pull cut by the registry", fmt.Errorf("pull: %w", &StreamError{"read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer"}), true},
		{"pull of a layer that ended early", &StreamError{"unexpected EOF"}, true},
		{"pull refused by the registry", &StreamError{"manifest for 127.0.0.1:5000/x:v1 not found: manifest unknown"}, false},
		{"pull unauthorized", &StreamError{"unauthorized: authentication required"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Transient(context.Background(), tc.err); got != tc.want {
				t.Errorf("Transient(%v) = %t, want %t", tc.err, got, tc.want)
			}
			if tc.err != nil && Transient(timeout, tc.err) {
				t.Errorf("transient with the caller's context done = true, want false")
			}
		})
	}
}

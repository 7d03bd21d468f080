// Package daemon is what the executor and the image administration share
// of a Docker daemon: the client dialled with the API version negotiated,
// the classification of a failed call (transient or not, the daemon away
// or refusing), the one retry policy, and the progress streams of pulls,
// builds and loads. Each consumer declares the narrow interface of the
// calls it makes where it makes them; this package declares none.
package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/client"

	"github.com/sandgate/sandgate"
)

// Local reports whether host names a daemon on this machine (the default
// socket or a unix socket), whose containers' cgroup files and socket
// this process can read.
func Local(host string) bool {
	return host == "" || strings.HasPrefix(host, "unix://")
}

// SocketPath is the file of a local daemon's socket, "" for a daemon
// reached over the network.
func SocketPath(host string) string {
	if host == "" {
		host = client.DefaultDockerHost
	}
	p, ok := strings.CutPrefix(host, "unix://")
	if !ok {
		return ""
	}
	return p
}

// Dial connects to the daemon at host (the local socket when empty), with
// the API version negotiated down to what the daemon speaks.
func Dial(host string) (*client.Client, error) {
	if host == "" {
		host = client.DefaultDockerHost
	}
	c, err := client.NewClientWithOpts(client.WithHost(host), client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, sandgate.WrapError(sandgate.CodeDockerUnavailable, err, "docker client for %s", host)
	}
	return c, nil
}

// Transient reports whether a Docker call that failed with err may succeed
// when tried again: the daemon could not be reached, answered 5xx, or the
// attempt timed out. The caller's own cancellation is never transient, and
// neither is anything the daemon refused on its merits (not found, invalid,
// conflict, forbidden).
func Transient(ctx context.Context, err error) bool {
	switch {
	case err == nil, ctx.Err() != nil:
		return false
	case cerrdefs.IsNotFound(err), cerrdefs.IsInvalidArgument(err), cerrdefs.IsConflict(err),
		cerrdefs.IsPermissionDenied(err), cerrdefs.IsUnauthorized(err), cerrdefs.IsNotImplemented(err),
		cerrdefs.IsFailedPrecondition(err), cerrdefs.IsNotModified(err), cerrdefs.IsCanceled(err):
		return false
	case client.IsErrConnectionFailed(err):
		return true
	case cerrdefs.IsUnavailable(err), cerrdefs.IsInternal(err), cerrdefs.IsDeadlineExceeded(err),
		cerrdefs.IsUnknown(err), cerrdefs.IsResourceExhausted(err):
		// 503, 500, per-attempt timeouts, and other unexpected statuses
		// (502, 504) that errhttp maps to Unknown.
		return true
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ENOENT),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return true
	}
	var streamErr *StreamError
	if errors.As(err, &streamErr) {
		return streamErr.Interrupted()
	}
	var netErr net.Error
	return errors.As(err, &netErr) && netErr.Timeout()
}

// Unreachable reports whether err means the daemon itself is away, as
// opposed to a call it answered with an error.
func Unreachable(err error) bool {
	if client.IsErrConnectionFailed(err) || cerrdefs.IsUnavailable(err) {
		return true
	}
	var opErr *net.OpError
	return errors.As(err, &opErr) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT)
}

// Error turns a failed Docker call into a sandgate error: the daemon being
// away is DOCKER-UNAVAILABLE, anything else the code given. A sandgate
// error is kept as it is.
func Error(code sandgate.ErrorCode, err error, format string, args ...any) *sandgate.Error {
	var se *sandgate.Error
	if errors.As(err, &se) {
		return se
	}
	if Unreachable(err) || (Transient(context.Background(), err) && !cerrdefs.IsInternal(err)) {
		code = sandgate.CodeDockerUnavailable
	}
	return sandgate.WrapError(code, err, format, args...)
}

// RefusalMessage is the daemon's own explanation of a refusal it made on
// the merits of a request; it is about the request, so the client may see
// it. It is cut at 512 bytes.
func RefusalMessage(err error) string {
	return Trim(err.Error())
}

// Trim cuts a message from the daemon at 512 bytes.
func Trim(msg string) string {
	const max = 512
	if len(msg) > max {
		return msg[:max] + "…"
	}
	return msg
}

// Message is one line of the daemon's build, pull and load progress.
type Message struct {
	Stream      string `json:"stream"`
	Status      string `json:"status"`
	Error       string `json:"error"`
	ErrorDetail *struct {
		Message string `json:"message"`
	} `json:"errorDetail"`
	Aux json.RawMessage `json:"aux"`
	// ID and ProgressDetail are a pull's: the layer a message is about,
	// and how many of its bytes are done of how many.
	ID             string `json:"id"`
	ProgressDetail struct {
		Current int64 `json:"current"`
		Total   int64 `json:"total"`
	} `json:"progressDetail"`
}

// StreamError is a failure the daemon reported inside a progress stream.
type StreamError struct{ Msg string }

func (e *StreamError) Error() string { return e.Msg }

// interruptions are what the daemon says in a stream when its connection
// to a registry broke, not when the registry refused: such a pull may be
// tried again.
var interruptions = []string{"connection refused", "connection reset", "unexpected EOF", "i/o timeout",
	"broken pipe", "TLS handshake timeout", "net/http: request canceled", "no route to host"}

// Interrupted reports whether the stream ended because a connection
// broke.
func (e *StreamError) Interrupted() bool {
	for _, s := range interruptions {
		if strings.Contains(e.Msg, s) {
			return true
		}
	}
	return false
}

// ReadMessages reads a progress stream to its end, calling each for every
// message, and returns the first error the daemon reported in it.
func ReadMessages(r io.Reader, each func(Message)) error {
	dec := json.NewDecoder(r)
	for {
		var m Message
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("read progress stream: %w", err)
		}
		if m.ErrorDetail != nil && m.ErrorDetail.Message != "" {
			return &StreamError{m.ErrorDetail.Message}
		}
		if m.Error != "" {
			return &StreamError{m.Error}
		}
		if each != nil {
			each(m)
		}
	}
}

package admission

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/sandgate/sandgate"
)

// Step 3, uploads: a body the gateway spools to its disk (a run's
// workspace archive, a file put into a session) is counted before a byte
// of it is read, by its declared size (Content-Length; the largest upload
// when it declares none), against its principal, its team and every
// principal together: the uploads under way and the bytes they hold.
// Past a principal's or a team's quota the request is RATE-LIMITED; past
// the gateway's, STORAGE-FULL. An upload that arrives slower than the
// minimum rate is cut and its bytes freed. Once spooled, an upload counts
// what it holds on disk; a run's archive keeps counting against its team
// and the gateway until the run ends, so queued runs' uploads count too.

// UploadLimits bound the uploads under way and the bytes they hold. A
// zero field takes its default.
type UploadLimits struct {
	// MaxBytes is one upload's largest size: what an upload that
	// declares no size is counted as (the gateway's MaxWorkspaceBytes).
	// Default 256 MiB.
	MaxBytes int64
	// PrincipalBytes bounds the bytes one principal's uploads under way
	// hold. Default 2 × MaxBytes.
	PrincipalBytes int64
	// PrincipalUploads bounds one principal's uploads under way. Default 4.
	PrincipalUploads int
	// TeamBytes bounds the bytes a team's uploads hold, under way and
	// spooled for its queued runs. Default 4 × MaxBytes.
	TeamBytes int64
	// GlobalBytes bounds the bytes every upload holds together: the
	// upload directory's share of the disk. Default 8 × MaxBytes.
	GlobalBytes int64
	// GlobalUploads bounds the uploads under way together. Default 64.
	GlobalUploads int
	// MinRate is the slowest an upload may arrive, in bytes a second,
	// measured over each RateWindow; a slower one is cut. Defaults: 64 KiB
	// a second over 10 seconds.
	MinRate    int64
	RateWindow time.Duration
}

func (l UploadLimits) withDefaults() UploadLimits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = 256 << 20
	}
	if l.PrincipalBytes <= 0 {
		l.PrincipalBytes = 2 * l.MaxBytes
	}
	if l.PrincipalUploads <= 0 {
		l.PrincipalUploads = 4
	}
	if l.TeamBytes <= 0 {
		l.TeamBytes = 4 * l.MaxBytes
	}
	if l.GlobalBytes <= 0 {
		l.GlobalBytes = 8 * l.MaxBytes
	}
	if l.GlobalUploads <= 0 {
		l.GlobalUploads = 64
	}
	if l.MinRate <= 0 {
		l.MinRate = 64 << 10
	}
	if l.RateWindow <= 0 {
		l.RateWindow = 10 * time.Second
	}
	return l
}

// UploadLimitsFromEnv reads the limits from the environment
// (SANDGATE_UPLOAD_PRINCIPAL_BYTES, SANDGATE_UPLOAD_PRINCIPAL_UPLOADS,
// SANDGATE_UPLOAD_TEAM_BYTES, SANDGATE_UPLOAD_GLOBAL_BYTES,
// SANDGATE_UPLOAD_GLOBAL_UPLOADS, SANDGATE_UPLOAD_MIN_RATE in bytes a
// second, SANDGATE_UPLOAD_RATE_WINDOW a duration); unset ones stay zero,
// for New to default (from the gateway's largest upload, MaxBytes).
func UploadLimitsFromEnv(getenv func(string) string) (UploadLimits, error) {
	var l UploadLimits
	for _, f := range []struct {
		name string
		dst  *int64
	}{
		{"SANDGATE_UPLOAD_PRINCIPAL_BYTES", &l.PrincipalBytes},
		{"SANDGATE_UPLOAD_TEAM_BYTES", &l.TeamBytes},
		{"SANDGATE_UPLOAD_GLOBAL_BYTES", &l.GlobalBytes},
		{"SANDGATE_UPLOAD_MIN_RATE", &l.MinRate},
	} {
		if v := getenv(f.name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				return l, fmt.Errorf("%s: must be a positive number of bytes, not %q", f.name, v)
			}
			*f.dst = n
		}
	}
	for _, f := range []struct {
		name string
		dst  *int
	}{{"SANDGATE_UPLOAD_PRINCIPAL_UPLOADS", &l.PrincipalUploads}, {"SANDGATE_UPLOAD_GLOBAL_UPLOADS", &l.GlobalUploads}} {
		if v := getenv(f.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return l, fmt.Errorf("%s: must be a positive count, not %q", f.name, v)
			}
			*f.dst = n
		}
	}
	if v := getenv("SANDGATE_UPLOAD_RATE_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return l, fmt.Errorf("SANDGATE_UPLOAD_RATE_WINDOW: must be a positive duration such as 10s, not %q", v)
		}
		l.RateWindow = d
	}
	return l, nil
}

// uploads counts the uploads under way and the bytes they hold.
type uploads struct {
	lim UploadLimits
	now func() time.Time

	mu          sync.Mutex
	byPrincipal map[string]*uploadUse
	byTeam      map[string]*uploadUse
	all         uploadUse
}

type uploadUse struct {
	bytes   int64
	flights int
}

func newUploads(l UploadLimits, now func() time.Time) *uploads {
	return &uploads{lim: l, now: now, byPrincipal: map[string]*uploadUse{}, byTeam: map[string]*uploadUse{}}
}

func (u *uploads) totals() (int64, int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.all.bytes, u.all.flights
}

// uploadHold is one upload's place: under way until landed, then the
// bytes it holds on disk until released.
type uploadHold struct {
	u               *uploads
	principal, team string
	bytes           int64
	flying          bool
	once            sync.Once
}

// reserve counts an upload of principal's team of declared bytes (-1 when
// it declares none), or refuses it: TOO-LARGE past one upload's size,
// RATE-LIMITED past the principal's or the team's quota, STORAGE-FULL
// past the gateway's.
func (u *uploads) reserve(principal, team string, declared int64) (*uploadHold, error) {
	lim := u.lim
	n := declared
	if n < 0 {
		n = lim.MaxBytes
	}
	if n > lim.MaxBytes {
		return nil, sandgate.Errorf(sandgate.CodeTooLarge, "body exceeds %d bytes", lim.MaxBytes)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	p, t := u.use(u.byPrincipal, principal), u.use(u.byTeam, team)
	defer u.drop(u.byPrincipal, principal)
	defer u.drop(u.byTeam, team)
	limited := func(scope, what string, held, max int64) error {
		return &sandgate.Error{Code: sandgate.CodeRateLimited,
			Message: fmt.Sprintf("%s is at its upload limit of %s (%d held); retry when an upload has ended", scope, what, held),
			Details: map[string]any{"limit": "uploads", "scope": scope, "held": held, "max": max, "asked": n}}
	}
	switch {
	case p.flights >= lim.PrincipalUploads:
		return nil, limited("principal "+principal, fmt.Sprintf("%d uploads under way", lim.PrincipalUploads), int64(p.flights), int64(lim.PrincipalUploads))
	case p.bytes+n > lim.PrincipalBytes:
		return nil, limited("principal "+principal, fmt.Sprintf("%d bytes", lim.PrincipalBytes), p.bytes, lim.PrincipalBytes)
	case t.bytes+n > lim.TeamBytes:
		return nil, limited("team "+team, fmt.Sprintf("%d bytes", lim.TeamBytes), t.bytes, lim.TeamBytes)
	case u.all.flights >= lim.GlobalUploads:
		return nil, limited("the gateway", fmt.Sprintf("%d uploads under way", lim.GlobalUploads), int64(u.all.flights), int64(lim.GlobalUploads))
	case u.all.bytes+n > lim.GlobalBytes:
		return nil, &sandgate.Error{Code: sandgate.CodeStorageFull,
			Message: fmt.Sprintf("the gateway's room for uploads (%d bytes) is taken; retry later", lim.GlobalBytes),
			Details: map[string]any{"limit": "uploads", "scope": "gateway", "held": u.all.bytes, "max": lim.GlobalBytes, "asked": n}}
	}
	for _, x := range []*uploadUse{p, t, &u.all} {
		x.bytes += n
		x.flights++
	}
	return &uploadHold{u: u, principal: principal, team: team, bytes: n, flying: true}, nil
}

func (u *uploads) use(m map[string]*uploadUse, k string) *uploadUse {
	x := m[k]
	if x == nil {
		x = &uploadUse{}
		m[k] = x
	}
	return x
}

func (u *uploads) drop(m map[string]*uploadUse, k string) {
	if x := m[k]; x != nil && x.bytes == 0 && x.flights == 0 {
		delete(m, k)
	}
}

// landed says the upload has been read whole and holds size bytes on
// disk: its principal's share ends, its team's and the gateway's go on
// at its size.
func (h *uploadHold) landed(size int64) {
	u := h.u
	u.mu.Lock()
	defer u.mu.Unlock()
	if !h.flying {
		return
	}
	p, t := u.use(u.byPrincipal, h.principal), u.use(u.byTeam, h.team)
	p.bytes -= h.bytes
	p.flights--
	u.drop(u.byPrincipal, h.principal)
	t.flights--
	u.all.flights--
	t.bytes += size - h.bytes
	u.all.bytes += size - h.bytes
	h.bytes, h.flying = size, false
}

// release gives back everything the upload holds; safe to call more than
// once, nil-safe.
func (h *uploadHold) release() {
	if h == nil {
		return
	}
	h.once.Do(func() {
		u := h.u
		u.mu.Lock()
		defer u.mu.Unlock()
		p, t := u.use(u.byPrincipal, h.principal), u.use(u.byTeam, h.team)
		if h.flying {
			p.bytes -= h.bytes
			p.flights--
			t.flights--
			u.all.flights--
		}
		t.bytes -= h.bytes
		u.all.bytes -= h.bytes
		u.drop(u.byPrincipal, h.principal)
		u.drop(u.byTeam, h.team)
	})
}

// Body is a request's body as the gateway received it, unread: the gate
// reads it at step 4, after the target and the bounds.
type Body struct {
	R io.Reader
	// Size is the declared size (Content-Length); -1 when the client
	// declared none.
	Size int64
	// Boundary is a multipart/form-data body's boundary; "" for others.
	Boundary string
	// SetReadDeadline, when set, bounds the next reads of R (the
	// connection's read deadline), so that a stalled upload is cut.
	SetReadDeadline func(time.Time) error
}

// errTooSlow is an upload that arrived slower than the minimum rate.
func (u *uploads) errTooSlow() error {
	return &sandgate.Error{Code: sandgate.CodeInvalidRequest, Field: "body",
		Message: fmt.Sprintf("arrived slower than %d bytes a second over %s; the upload was cut and nothing of it kept", u.lim.MinRate, u.lim.RateWindow)}
}

// paced reads b's body for an upload: each RateWindow must bring at
// least MinRate bytes a second of it, or the read fails and the upload is
// cut. With a read deadline at the end of each window, a stalled body is
// cut at the window's end rather than when the client gives up.
// Call stop once the upload has been read.
func (u *uploads) paced(r io.Reader, setDeadline func(time.Time) error) *pacedReader {
	return &pacedReader{u: u, r: r, deadline: setDeadline}
}

type pacedReader struct {
	u        *uploads
	r        io.Reader
	deadline func(time.Time) error
	start    time.Time
	n        int64
	err      error
}

func (p *pacedReader) Read(b []byte) (int, error) {
	if p.err != nil {
		return 0, p.err
	}
	lim, now := p.u.lim, p.u.now()
	if p.start.IsZero() {
		p.start = now
		p.arm()
	}
	n, err := p.r.Read(b)
	p.n += int64(n)
	now = p.u.now()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		p.err = p.u.errTooSlow()
		return n, p.err
	}
	if elapsed := now.Sub(p.start); elapsed >= lim.RateWindow {
		if float64(p.n) < float64(lim.MinRate)*elapsed.Seconds() {
			p.err = p.u.errTooSlow()
			return n, p.err
		}
		p.start, p.n = now, 0
		p.arm()
	}
	return n, err
}

// arm sets the read deadline at the end of the current window (a
// deadline is the connection's, on the wall clock).
func (p *pacedReader) arm() {
	if p.deadline != nil {
		_ = p.deadline(time.Now().Add(p.u.lim.RateWindow))
	}
}

// stop lifts the read deadline once the upload has been read, or, for
// an upload that was cut, leaves it in the past: nothing more of the body
// is read, not even to drain the connection for another request.
func (p *pacedReader) stop() {
	if p.deadline == nil {
		return
	}
	if p.err != nil {
		_ = p.deadline(time.Now())
		return
	}
	_ = p.deadline(time.Time{})
}

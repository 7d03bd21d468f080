package gateway

import (
	"context"
	"errors"
	"io"

	"github.com/sandgate/sandgate"
)

// The files of a session: written into and read out of its container's
// workspace once the gate admitted the request (admission.PutFiles and
// GetFiles), which records them. A command in a session is a run
// (runs.start with the session set).

// putFiles writes an upload into the workspace of a session open on this
// node.
func (s *sessions) putFiles(ctx context.Context, id string, up sandgate.FileUpload) (sandgate.FileDigest, error) {
	x, l, err := s.openHere(id)
	if err != nil {
		return sandgate.FileDigest{}, err
	}
	l.touch(s.now(), 0)
	s.saveActivity(l)
	return x.PutFiles(ctx, id, l.spec, up)
}

// getFiles streams a file or a directory of a session open on this node
// to the writer w makes once its kind is known.
func (s *sessions) getFiles(ctx context.Context, id, path string, w func(kind string) (io.Writer, error)) (sandgate.FileDigest, error) {
	x, l, err := s.openHere(id)
	if err != nil {
		return sandgate.FileDigest{}, err
	}
	l.touch(s.now(), 0)
	s.saveActivity(l)
	var out io.Writer
	var werr error
	d, err := x.GetFiles(ctx, id, path, writerFunc(func(b []byte) (int, error) {
		if out == nil {
			return 0, errors.New("no writer")
		}
		return out.Write(b)
	}), func(kind string) { out, werr = w(kind) })
	if err == nil {
		err = werr
	}
	return d, err
}

// openHere is the executor and the live state of a session open on this
// node; CONFLICT when it ended meanwhile.
func (s *sessions) openHere(id string) (sandgate.SessionExecutor, *liveSession, error) {
	x, err := s.executorOf(id)
	if err != nil {
		return nil, nil, err
	}
	l := s.live.get(id)
	if l == nil {
		return nil, nil, sandgate.Errorf(sandgate.CodeConflict, "session %s is not open on this node", id)
	}
	return x, l, nil
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

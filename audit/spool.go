package audit

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"
)

// The spool keeps sealed events that Postgres has not yet acknowledged. It
// is one append-only file of records, each framed as
//
//	uint32be(len(payload)) ‖ uint32be(CRC-32C(payload)) ‖ payload
//
// where payload is the sealed event as JSON. Every append is fsync'd before
// the writer goes on. Once every record is in Postgres the file is emptied.
//
// On open, a record cut short (a crash mid-write) or failing its checksum
// ends the readable spool: what follows is moved to a ".corrupt-…" file
// next to it, never silently discarded, and the spool is truncated to the
// last good record.

const (
	spoolFile      = "spool.log"
	spoolLock      = "lock"
	spoolChainFile = "chain_id"
	frameHeader    = 8
	// maxSpoolRecord bounds one record so a damaged length cannot make the
	// reader allocate without limit.
	maxSpoolRecord = 64 << 20
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// errSpoolFull means appending would take the spool past its size limit.
var errSpoolFull = errors.New("audit spool is full")

// spool is the open spool file. Only the writer goroutine uses it.
type spool struct {
	dir  string
	f    *os.File
	lock *os.File
	size int64
	max  int64
	// bytes mirrors size for readers outside the writer goroutine
	// (metrics).
	bytes atomic.Int64
}

// openSpool locks dir for this process, opens the spool in it and returns
// the records it holds, in order.
func openSpool(dir string, max int64, logf func(msg string, args ...any)) (*spool, []*sealed, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("create spool dir: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, spoolLock), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("open spool lock: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, nil, fmt.Errorf("spool %s is in use by another sandgate process: %w", dir, err)
	}
	path := filepath.Join(dir, spoolFile)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		lock.Close()
		return nil, nil, fmt.Errorf("open spool: %w", err)
	}
	recs, good, err := readSpool(f)
	if err != nil {
		f.Close()
		lock.Close()
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		lock.Close()
		return nil, nil, fmt.Errorf("stat spool: %w", err)
	}
	if st.Size() > good {
		// Keep the unreadable rest for a human, then cut it off.
		bad := fmt.Sprintf("%s.corrupt-%d", path, time.Now().UnixNano())
		if err := copyTail(f, good, bad); err != nil {
			f.Close()
			lock.Close()
			return nil, nil, err
		}
		if err := f.Truncate(good); err != nil {
			f.Close()
			lock.Close()
			return nil, nil, fmt.Errorf("truncate spool: %w", err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			lock.Close()
			return nil, nil, fmt.Errorf("sync spool: %w", err)
		}
		logf("audit spool: damaged or cut-short record truncated; kept the unreadable bytes",
			"spool", path, "good_bytes", good, "bad_bytes", st.Size()-good, "saved_to", bad, "records_kept", len(recs))
	}
	if _, err := f.Seek(good, io.SeekStart); err != nil {
		f.Close()
		lock.Close()
		return nil, nil, fmt.Errorf("seek spool: %w", err)
	}
	sp := &spool{dir: dir, f: f, lock: lock, size: good, max: max}
	sp.bytes.Store(good)
	return sp, recs, nil
}

// readSpool reads records from the start of f until the end or the first
// bad one, and returns them with the offset just past the last good one.
func readSpool(f *os.File) ([]*sealed, int64, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, 0, fmt.Errorf("seek spool: %w", err)
	}
	r := bufio.NewReaderSize(f, 1<<20)
	var recs []*sealed
	var off int64
	var hdr [frameHeader]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return recs, off, nil // end, or a cut-short header
		}
		n := binary.BigEndian.Uint32(hdr[:4])
		sum := binary.BigEndian.Uint32(hdr[4:])
		if n == 0 || n > maxSpoolRecord {
			return recs, off, nil
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(r, payload); err != nil {
			return recs, off, nil
		}
		if crc32.Checksum(payload, crcTable) != sum {
			return recs, off, nil
		}
		var s sealed
		dec := json.NewDecoder(bytes.NewReader(payload))
		dec.UseNumber() // payload numbers stay as written
		if err := dec.Decode(&s); err != nil {
			return recs, off, nil
		}
		recs = append(recs, &s)
		off += frameHeader + int64(n)
	}
}

func copyTail(f *os.File, from int64, to string) error {
	out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("save damaged spool tail: %w", err)
	}
	if _, err := io.Copy(out, io.NewSectionReader(f, from, 1<<62)); err != nil {
		out.Close()
		return fmt.Errorf("save damaged spool tail: %w", err)
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return fmt.Errorf("save damaged spool tail: %w", err)
	}
	return out.Close()
}

// encodeFrames frames recs for the spool.
func encodeFrames(recs []*sealed) ([]byte, error) {
	var buf []byte
	for _, s := range recs {
		payload, err := json.Marshal(s)
		if err != nil {
			return nil, fmt.Errorf("encode spool record: %w", err)
		}
		var hdr [frameHeader]byte
		binary.BigEndian.PutUint32(hdr[:4], uint32(len(payload)))
		binary.BigEndian.PutUint32(hdr[4:], crc32.Checksum(payload, crcTable))
		buf = append(buf, hdr[:]...)
		buf = append(buf, payload...)
	}
	return buf, nil
}

// append writes recs and fsyncs them. It writes nothing and returns
// errSpoolFull when they would not fit.
func (s *spool) append(recs []*sealed) error {
	buf, err := encodeFrames(recs)
	if err != nil {
		return err
	}
	if s.size+int64(len(buf)) > s.max {
		return errSpoolFull
	}
	if _, err := s.f.WriteAt(buf, s.size); err != nil {
		// A partial write is cut off on the next open; the size does not
		// move so the next append overwrites it.
		return fmt.Errorf("write spool: %w", err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("sync spool: %w", err)
	}
	s.size += int64(len(buf))
	s.bytes.Store(s.size)
	return nil
}

// reset empties the spool once everything in it is in Postgres.
func (s *spool) reset() error {
	if s.size == 0 {
		return nil
	}
	if err := s.f.Truncate(0); err != nil {
		return fmt.Errorf("truncate spool: %w", err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("sync spool: %w", err)
	}
	s.size = 0
	s.bytes.Store(0)
	return nil
}

// setAside moves the spool's records to path (kept for a human) and
// goes on with an empty spool.
func (s *spool) setAside(path string) error {
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("sync spool: %w", err)
	}
	cur := filepath.Join(s.dir, spoolFile)
	if err := os.Rename(cur, path); err != nil {
		return fmt.Errorf("keep spool as %s: %w", path, err)
	}
	f, err := os.OpenFile(cur, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("open a new spool: %w", err)
	}
	if err := syncFile(s.dir); err != nil {
		f.Close()
		return err
	}
	s.f.Close()
	s.f, s.size = f, 0
	s.bytes.Store(0)
	return nil
}

func (s *spool) close() error {
	err := s.f.Close()
	if lerr := s.lock.Close(); err == nil {
		err = lerr
	}
	return err
}

// chainIDFile returns the chain ID persisted in dir, creating it from
// newID when there is none, so a restarted writer continues its chain.
func chainIDFile(dir string, newID func() string) (string, error) {
	path := filepath.Join(dir, spoolChainFile)
	data, err := os.ReadFile(path)
	if err == nil && len(data) > 0 {
		return string(trimSpace(data)), nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read chain id: %w", err)
	}
	id := newID()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write chain id: %w", err)
	}
	if err := syncFile(tmp); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("write chain id: %w", err)
	}
	return id, syncFile(dir)
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}

// Package agent is sandgate's in-sandbox agent and the protocol it speaks
// with the gateway: the agent (Serve) runs as a container's main process,
// under the container's init, as the sandbox user with every restriction
// of the container, and starts commands on the gateway's request; the
// gateway's side (Conn) drives it over the container's attached stdin and
// stdout. It links the standard library alone.
//
// Every frame, either way, carries an HMAC-SHA256 over its direction, its
// header and its payload with a key of 32 random bytes that the gateway
// gives the agent in its first frame (hello), before any command runs, and
// a sequence number one more than the previous frame's. Code in the
// sandbox never learns the key (the agent is not dumpable, and the key is
// in no file, argument or environment), so it can neither drive the agent
// nor forge a frame to the gateway: a process that writes into the
// container's stdio (through /proc/1/fd of the init, say) breaks the
// stream, and the side that reads the broken frame ends it. Commands'
// output reaches the gateway only as the payload of frames the agent
// makes from their pipes.
package agent

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"sync"
)

// Type says what a frame is.
type Type uint8

// The frame types. The gateway sends hello, start, stdin and signal; the
// agent sends ready, started, stdout, stderr, exit and failed.
const (
	// TypeHello is the gateway's first frame: its payload is the key.
	TypeHello Type = 1
	// TypeStart starts command ID: its payload is a Command in JSON.
	TypeStart Type = 2
	// TypeStdin is input for command ID; an empty payload closes it.
	TypeStdin Type = 3
	// TypeSignal sends the signal numbered by its one byte of payload to
	// command ID's process group.
	TypeSignal Type = 4
	// TypeOpen opens stream ID: its payload is an Open in JSON (a
	// terminal, or a connection to a port of the sandbox's loopback).
	// The stream's bytes travel as stdin frames to the agent and stdout
	// frames from it, each direction within the window its reader grants.
	TypeOpen Type = 5
	// TypeWindow grants the agent 4 more bytes' worth (big-endian count)
	// of stream ID's output.
	TypeWindow Type = 6
	// TypeResize sets stream ID's terminal size: rows and columns, two
	// big-endian bytes each.
	TypeResize Type = 7
	// TypeClose ends stream ID: its connection is closed, its terminal's
	// process group hung up.
	TypeClose Type = 8

	// TypeReady answers hello: its payload is the agent's protocol version.
	TypeReady Type = 65
	// TypeStarted says command ID runs: its payload is its PID (4 bytes).
	TypeStarted Type = 66
	// TypeStdout and TypeStderr carry command ID's output.
	TypeStdout Type = 67
	TypeStderr Type = 68
	// TypeExit is command ID's end: an Exit in JSON.
	TypeExit Type = 69
	// TypeFailed says command ID could not start, or (ID 0) the agent
	// refuses to go on: its payload is the reason.
	TypeFailed Type = 70
	// TypeAck grants the gateway 4 more bytes' worth (big-endian count)
	// of stream ID's input, once the agent has written it.
	TypeAck Type = 71
)

// Version is the protocol's version, the payload of ready.
const Version = "sandgate-agent/2"

// KeySize is the size of the key hello carries.
const KeySize = 32

// MaxPayload bounds a frame's payload.
const MaxPayload = 64 << 10

const (
	headerSize = 1 + 4 + 8 + 4 // type, id, seq, length
	macSize    = sha256.Size
)

// The directions a frame may travel, part of what its MAC covers, so that
// a frame of one side is never taken for one of the other.
const (
	toAgent   byte = 'A'
	toGateway byte = 'G'
)

// Frame is one message.
type Frame struct {
	Type    Type
	ID      uint32
	Payload []byte
}

// ErrAuth is the error of a frame whose MAC or sequence number is wrong:
// the stream was written by someone without the key.
var ErrAuth = errors.New("agent: frame not authenticated")

// writer encodes frames for one direction, each in one Write.
type writer struct {
	mu  sync.Mutex
	w   io.Writer
	dir byte
	mac hash.Hash
	seq uint64
	buf []byte
}

func newWriter(w io.Writer, dir byte, key []byte) *writer {
	return &writer{w: w, dir: dir, mac: hmac.New(sha256.New, key)}
}

// write sends one frame; it is safe for concurrent use.
func (w *writer) write(f Frame) error {
	if len(f.Payload) > MaxPayload {
		return fmt.Errorf("agent: payload of %d bytes is over %d", len(f.Payload), MaxPayload)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seq++
	n := headerSize + len(f.Payload) + macSize
	if cap(w.buf) < n {
		w.buf = make([]byte, n)
	}
	b := w.buf[:n]
	putHeader(b, f, w.seq)
	copy(b[headerSize:], f.Payload)
	w.mac.Reset()
	w.mac.Write([]byte{w.dir})
	w.mac.Write(b[:headerSize+len(f.Payload)])
	w.mac.Sum(b[:headerSize+len(f.Payload)])
	_, err := w.w.Write(b)
	return err
}

func putHeader(b []byte, f Frame, seq uint64) {
	b[0] = byte(f.Type)
	binary.BigEndian.PutUint32(b[1:5], f.ID)
	binary.BigEndian.PutUint64(b[5:13], seq)
	binary.BigEndian.PutUint32(b[13:17], uint32(len(f.Payload)))
}

// Reader decodes and authenticates the frames of one direction.
type Reader struct {
	r   *bufio.Reader
	dir byte
	mac hash.Hash
	seq uint64
	buf []byte
}

// newReader reads frames travelling in dir; key may be nil until hello.
func newReader(r io.Reader, dir byte, key []byte) *Reader {
	rd := &Reader{r: bufio.NewReaderSize(r, 64<<10), dir: dir}
	if key != nil {
		rd.mac = hmac.New(sha256.New, key)
	}
	return rd
}

// NewGatewayReader reads the frames an agent sends, authenticated with key.
// It is exported for the fuzz test of the decoder.
func NewGatewayReader(r io.Reader, key []byte) *Reader { return newReader(r, toGateway, key) }

// Next returns the next frame. Its payload is valid until the next call.
// A frame whose MAC or sequence number is wrong is ErrAuth; a stream that
// ends inside a frame is io.ErrUnexpectedEOF.
func (rd *Reader) Next() (Frame, error) {
	var h [headerSize]byte
	if _, err := io.ReadFull(rd.r, h[:]); err != nil {
		return Frame{}, err
	}
	n := binary.BigEndian.Uint32(h[13:17])
	if n > MaxPayload {
		return Frame{}, fmt.Errorf("%w: payload of %d bytes is over %d", ErrAuth, n, MaxPayload)
	}
	if cap(rd.buf) < int(n)+macSize {
		rd.buf = make([]byte, int(n)+macSize)
	}
	body := rd.buf[:int(n)+macSize]
	if _, err := io.ReadFull(rd.r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	f := Frame{Type: Type(h[0]), ID: binary.BigEndian.Uint32(h[1:5]), Payload: body[:n]}
	if rd.mac == nil {
		// Only hello may come before the key, and it brings the key.
		if f.Type != TypeHello || n != KeySize {
			return Frame{}, fmt.Errorf("%w: the first frame is not hello", ErrAuth)
		}
		rd.mac = hmac.New(sha256.New, f.Payload)
	}
	rd.mac.Reset()
	rd.mac.Write([]byte{rd.dir})
	rd.mac.Write(h[:])
	rd.mac.Write(f.Payload)
	var sum [macSize]byte
	if !hmac.Equal(rd.mac.Sum(sum[:0]), body[n:]) {
		return Frame{}, fmt.Errorf("%w: bad MAC", ErrAuth)
	}
	rd.seq++
	if seq := binary.BigEndian.Uint64(h[5:13]); seq != rd.seq {
		return Frame{}, fmt.Errorf("%w: sequence %d, want %d", ErrAuth, seq, rd.seq)
	}
	return f, nil
}

package gateway

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The signature of a forwarded request. It proves the hop came from a
// node of the cluster, and it covers everything the owner acts on, so
// that no one who reads a forward's headers (a log, a proxy between the
// nodes) can have another request taken for a forward: the two nodes,
// the time, a nonce the receiving node accepts once, the method and
// URI, the digest of the caller's Authorization header, the content
// type, and the body: its SHA-256 when it is no longer than the
// gateway's JSON body limit (every JSON body), else its length (a
// workspace archive or a session's files, streamed through as they
// come; the caller's token, which the owner checks again, is bound all
// the same).
const (
	headerForwardNonce = "X-Sandgate-Forward-Nonce"
	headerForwardBody  = "X-Sandgate-Forward-Body"
	// forwardNonceBytes is a nonce's length (hex in its header).
	forwardNonceBytes = 16
	// maxForwardNonces bounds the nonces a node remembers (each for twice
	// the skew); a node sent more forwards than that in two minutes
	// refuses the next until some expire.
	maxForwardNonces = 200_000
)

// forwardClaim is what a forward's signature covers.
type forwardClaim struct {
	From, To, At, Nonce string
	Method, URI         string
	// Caller is the hex SHA-256 of the request's Authorization header.
	Caller      string
	ContentType string
	// Body is "sha256:<hex>" of the whole body, or "length:<n>" (n is -1
	// for a body of unknown length) for one longer than the JSON limit.
	Body string
}

// mac is the claim's signature: HMAC-SHA256 with the cluster's secret.
func (f forwardClaim) mac(secret []byte) string {
	m := hmac.New(sha256.New, secret)
	for _, v := range []string{"sandgate-forward-v2", f.From, f.To, f.At, f.Nonce, f.Method, f.URI, f.Caller, f.ContentType, f.Body} {
		// Length-prefixed: no field can end where another begins.
		fmt.Fprintf(m, "%d:%s\n", len(v), v)
	}
	return hex.EncodeToString(m.Sum(nil))
}

// check verifies sig and the claim's time against now.
func (f forwardClaim) check(secret []byte, sig string, now time.Time) error {
	if len(secret) == 0 {
		return errors.New("this node has no cluster secret")
	}
	if f.From == "" || sig == "" || len(f.Nonce) != 2*forwardNonceBytes {
		return errors.New("a node, a nonce and a signature are required")
	}
	sec, err := strconv.ParseInt(f.At, 10, 64)
	if err != nil {
		return errors.New("its time is not Unix seconds")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > forwardSkew || d < -forwardSkew {
		return fmt.Errorf("its time is %s from this node's", d.Round(time.Second))
	}
	if !hmac.Equal([]byte(strings.ToLower(sig)), []byte(f.mac(secret))) {
		return errors.New("the signature does not hold for this request")
	}
	return nil
}

// callerDigest is the hex SHA-256 of an Authorization header.
func callerDigest(authorization string) string {
	d := sha256.Sum256([]byte(authorization))
	return hex.EncodeToString(d[:])
}

// newForwardNonce is a random nonce for one forward.
func newForwardNonce() string {
	b := make([]byte, forwardNonceBytes)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// bodyClaim reads req's body when it is at most limit bytes, puts it
// back to be sent on, and names it by digest; a longer one is named by
// its length and streamed (what was read goes first).
func bodyClaim(req *http.Request, limit int64) (string, error) {
	if req.Body == nil || req.Body == http.NoBody || req.ContentLength == 0 {
		return digestClaim(nil), nil
	}
	if req.ContentLength > limit {
		return "length:" + strconv.FormatInt(req.ContentLength, 10), nil
	}
	head, err := io.ReadAll(io.LimitReader(req.Body, limit+1))
	if err != nil {
		return "", err
	}
	if int64(len(head)) > limit {
		req.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(head), req.Body), req.Body}
		return "length:" + strconv.FormatInt(req.ContentLength, 10), nil
	}
	req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(head)), int64(len(head))
	return digestClaim(head), nil
}

func digestClaim(b []byte) string {
	d := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(d[:])
}

// checkBody holds req's body to its signed claim: a digest is checked
// over the whole body (read here, at most limit bytes, and put back for
// the handler); a length must be the request's own Content-Length.
func checkBody(req *http.Request, claim string, limit int64) error {
	if n, ok := strings.CutPrefix(claim, "length:"); ok {
		if n != strconv.FormatInt(req.ContentLength, 10) {
			return errors.New("its body's length is not the one signed")
		}
		return nil
	}
	if !strings.HasPrefix(claim, "sha256:") {
		return errors.New("its body is not named")
	}
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(io.LimitReader(req.Body, limit+1)); err != nil {
			return fmt.Errorf("its body could not be read: %w", err)
		}
		if int64(len(body)) > limit {
			return errors.New("its body is longer than the one signed")
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	if !hmac.Equal([]byte(digestClaim(body)), []byte(claim)) {
		return errors.New("its body is not the one signed")
	}
	return nil
}

// errForwardReplayed: a forward's nonce was accepted before.
var errForwardReplayed = errors.New("it was accepted once already")

// usedNonces are the forward nonces a node has accepted, each kept for
// twice the skew (after that its time is refused anyway), so that a
// forward is accepted once.
type usedNonces struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

// use accepts nonce once; an error when it was seen, or when the node
// remembers as many as it may.
func (u *usedNonces) use(nonce string, now time.Time) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.seen == nil {
		u.seen = map[string]time.Time{}
	}
	if _, ok := u.seen[nonce]; ok {
		return errForwardReplayed
	}
	if len(u.seen) >= maxForwardNonces {
		for n, until := range u.seen {
			if now.After(until) {
				delete(u.seen, n)
			}
		}
		if len(u.seen) >= maxForwardNonces {
			return fmt.Errorf("this node has accepted %d forwards in the last %s", len(u.seen), 2*forwardSkew)
		}
	}
	u.seen[nonce] = now.Add(2 * forwardSkew)
	return nil
}

package identity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// Algorithms are the only signature algorithms a token may use: RSA and
// ECDSA P-256 with SHA-256, and Ed25519. "none" and every HMAC are
// refused before a key is looked up, so a public key can never serve as
// an HMAC secret.
var Algorithms = []jose.SignatureAlgorithm{jose.RS256, jose.ES256, jose.EdDSA}

// maxJWKSBytes bounds an issuer's key set document.
const maxJWKSBytes = 1 << 20

// keySet is one issuer's signing keys (its JWKS), fetched when first
// needed, again when a token names a key it does not hold (at most once
// per minRefresh, however many such tokens come), and again on use once
// they are older than maxAge. It implements go-oidc's KeySet.
type keySet struct {
	url        string
	client     *http.Client
	now        func() time.Time
	minRefresh time.Duration
	maxAge     time.Duration
	// fetches counts the documents fetched, for tests and metrics.
	fetches func()

	mu      sync.Mutex
	keys    []jose.JSONWebKey
	fetched time.Time // when keys were fetched
	tried   time.Time // when a fetch was last begun
	// inflight is closed when the fetch under way ends.
	inflight chan struct{}
	lastErr  error
}

// errUnknownKey means no key of the issuer's verifies the token, after
// the refresh the token may trigger.
var errUnknownKey = errors.New("no signing key of the issuer matches the token's key ID")

// VerifySignature checks raw's one signature with the issuer's key and
// returns its payload.
func (k *keySet) VerifySignature(ctx context.Context, raw string) ([]byte, error) {
	jws, err := jose.ParseSignedCompact(raw, Algorithms)
	if err != nil {
		return nil, err
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("a token must carry exactly one signature")
	}
	h := jws.Signatures[0].Header
	keys, err := k.current(ctx, false)
	if err != nil {
		return nil, err
	}
	if payload, ok := verifyWith(jws, h, keys); ok {
		return payload, nil
	}
	// A key the set does not hold: the issuer may have rotated.
	if keys, err = k.current(ctx, true); err != nil {
		return nil, err
	}
	if payload, ok := verifyWith(jws, h, keys); ok {
		return payload, nil
	}
	return nil, errUnknownKey
}

// verifyWith tries the keys that h's kid names (every key when it names
// none) whose use is signing and whose algorithm, when they state one,
// is the token's.
func verifyWith(jws *jose.JSONWebSignature, h jose.Header, keys []jose.JSONWebKey) ([]byte, bool) {
	for _, key := range keys {
		if h.KeyID != "" && key.KeyID != h.KeyID {
			continue
		}
		if key.Use != "" && key.Use != "sig" {
			continue
		}
		if key.Algorithm != "" && key.Algorithm != h.Algorithm {
			continue
		}
		if !key.IsPublic() {
			continue
		}
		if payload, err := jws.Verify(key.Key); err == nil {
			return payload, true
		}
	}
	return nil, false
}

// current returns the keys, fetching them when there are none, when they
// are older than maxAge, or when refresh asks and minRefresh has passed
// since the last fetch began. Concurrent callers share one fetch. A
// failed refresh keeps the keys it had.
func (k *keySet) current(ctx context.Context, refresh bool) ([]jose.JSONWebKey, error) {
	k.mu.Lock()
	now := k.now()
	stale := k.fetched.IsZero() || (k.maxAge > 0 && now.Sub(k.fetched) > k.maxAge)
	allowed := k.tried.IsZero() || now.Sub(k.tried) >= k.minRefresh
	if !(stale || refresh) || !allowed {
		keys, err := k.keys, error(nil)
		if len(keys) == 0 {
			err = k.lastErr
			if err == nil {
				err = errors.New("the issuer's signing keys are not known yet")
			}
		}
		k.mu.Unlock()
		return keys, err
	}
	wait := k.inflight
	if wait == nil {
		wait = make(chan struct{})
		k.inflight, k.tried = wait, now
		go k.fetch(wait)
	}
	k.mu.Unlock()
	select {
	case <-wait:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.keys) == 0 {
		return nil, k.lastErr
	}
	return k.keys, nil
}

// fetch reads the key set document and closes done.
func (k *keySet) fetch(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), fetchTimeout)
	defer cancel()
	keys, err := k.get(ctx)
	k.mu.Lock()
	defer k.mu.Unlock()
	if err == nil {
		k.keys, k.fetched, k.lastErr = keys, k.now(), nil
	} else {
		k.lastErr = err
	}
	k.inflight = nil
	close(done)
}

// fetchTimeout bounds one discovery or key set request.
const fetchTimeout = 10 * time.Second

func (k *keySet) get(ctx context.Context) ([]jose.JSONWebKey, error) {
	if k.fetches != nil {
		k.fetches()
	}
	var set jose.JSONWebKeySet
	if err := getJSON(ctx, k.client, k.url, &set); err != nil {
		return nil, fmt.Errorf("fetch the issuer's keys: %w", err)
	}
	keys := slices.DeleteFunc(set.Keys, func(key jose.JSONWebKey) bool { return !key.Valid() || !key.IsPublic() })
	if len(keys) == 0 {
		return nil, fmt.Errorf("the issuer's key set %s holds no public key", k.url)
	}
	return keys, nil
}

// getJSON GETs url and decodes its JSON body, at most maxJWKSBytes.
func getJSON(ctx context.Context, client *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return err
	}
	if len(body) > maxJWKSBytes {
		return fmt.Errorf("%s: the document exceeds %d bytes", url, maxJWKSBytes)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return json.Unmarshal(body, v)
}

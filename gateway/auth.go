package gateway

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"sigs.k8s.io/yaml"

	"github.com/sandgate/sandgate"
)

// PrincipalEntry is one principal of a tokens file.
type PrincipalEntry struct {
	Name  string          `json:"name"`
	Team  string          `json:"team"`
	Roles []sandgate.Role `json:"roles"`
	// TokenSHA256 is the hex SHA-256 of the bearer token.
	TokenSHA256 string `json:"token_sha256"`
}

// TokensFile is the format of SANDGATE_TOKENS_FILE (YAML or JSON).
type TokensFile struct {
	Principals []PrincipalEntry `json:"principals"`
}

// Principals authenticates bearer tokens against SHA-256 hashes. It is safe
// for concurrent use.
type Principals struct {
	entries []principalHash
}

type principalHash struct {
	hash      [sha256.Size]byte
	principal sandgate.Principal
}

// LoadPrincipals reads a tokens file (YAML or JSON, unknown fields refused)
// and checks every entry: a name, a known role, a team for submitters, a
// 64-hex-digit hash, no name or hash used twice.
func LoadPrincipals(path string) (*Principals, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read tokens file: %w", err)
	}
	var f TokensFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("parse tokens file %s: %w", path, err)
	}
	p, err := NewPrincipals(f.Principals)
	if err != nil {
		return nil, fmt.Errorf("tokens file %s: %w", path, err)
	}
	return p, nil
}

// NewPrincipals checks entries as LoadPrincipals does and returns the
// authenticator.
func NewPrincipals(entries []PrincipalEntry) (*Principals, error) {
	if len(entries) == 0 {
		return nil, fmt.Errorf("no principals")
	}
	p := &Principals{}
	names := map[string]bool{}
	hashes := map[[sha256.Size]byte]bool{}
	for i, e := range entries {
		where := fmt.Sprintf("principals[%d]", i)
		if strings.TrimSpace(e.Name) == "" {
			return nil, fmt.Errorf("%s: name is required", where)
		}
		if names[e.Name] {
			return nil, fmt.Errorf("%s: name %q is used twice", where, e.Name)
		}
		names[e.Name] = true
		if len(e.Roles) == 0 {
			return nil, fmt.Errorf("%s (%s): at least one role is required", where, e.Name)
		}
		for _, r := range e.Roles {
			if !slices.Contains([]sandgate.Role{sandgate.RoleSubmitter, sandgate.RoleSecurity, sandgate.RoleAuditor, sandgate.RoleAdmin}, r) {
				return nil, fmt.Errorf("%s (%s): unknown role %q (submitter, security, auditor, admin)", where, e.Name, r)
			}
		}
		if slices.Contains(e.Roles, sandgate.RoleSubmitter) && e.Team == "" {
			return nil, fmt.Errorf("%s (%s): a submitter needs a team", where, e.Name)
		}
		raw, err := hex.DecodeString(strings.ToLower(strings.TrimSpace(e.TokenSHA256)))
		if err != nil || len(raw) != sha256.Size {
			return nil, fmt.Errorf("%s (%s): token_sha256 must be 64 hex digits", where, e.Name)
		}
		var h [sha256.Size]byte
		copy(h[:], raw)
		if hashes[h] {
			return nil, fmt.Errorf("%s (%s): token_sha256 is used by another principal", where, e.Name)
		}
		hashes[h] = true
		p.entries = append(p.entries, principalHash{hash: h, principal: sandgate.Principal{
			Name: e.Name, Team: e.Team, Roles: slices.Clone(e.Roles),
		}})
	}
	return p, nil
}

// DevPrincipals makes one development principal "dev" of team "dev" with
// every role and a fresh random token, returned for printing. It is what
// SANDGATE_DEV=1 uses.
func DevPrincipals() (*Principals, string, error) {
	token, err := NewDevToken()
	if err != nil {
		return nil, "", err
	}
	p, err := DevPrincipalsFor(token)
	return p, token, err
}

// NewDevToken makes a fresh random development token ("sgdev_" and 48 hex
// digits).
func NewDevToken() (string, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("generate dev token: %w", err)
	}
	return "sgdev_" + hex.EncodeToString(b[:]), nil
}

// DevPrincipalsFor makes the development principal of DevPrincipals with
// the token given, one kept from an earlier start.
func DevPrincipalsFor(token string) (*Principals, error) {
	sum := sha256.Sum256([]byte(token))
	return NewPrincipals([]PrincipalEntry{{
		Name:        "dev",
		Team:        "dev",
		Roles:       []sandgate.Role{sandgate.RoleSubmitter, sandgate.RoleSecurity, sandgate.RoleAuditor, sandgate.RoleAdmin},
		TokenSHA256: hex.EncodeToString(sum[:]),
	}})
}

// HashToken returns the hex SHA-256 of a token, the form a tokens file
// stores.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Authenticate compares the token's hash with every entry in constant time,
// visiting all of them whatever matches.
func (p *Principals) Authenticate(token string) (sandgate.Principal, bool) {
	sum := sha256.Sum256([]byte(token))
	found := -1
	for i := range p.entries {
		if subtle.ConstantTimeCompare(sum[:], p.entries[i].hash[:]) == 1 {
			found = i
		}
	}
	if found < 0 || token == "" {
		return sandgate.Principal{}, false
	}
	pr := p.entries[found].principal
	pr.Roles = slices.Clone(pr.Roles)
	return pr, true
}

// limiters keeps one token bucket per source address, forgetting those idle
// for longer than a bucket takes to refill. A source without a bucket has a
// full one, so checking a source that never spent a token takes a read lock
// and a map lookup, and creates nothing.
type limiters struct {
	mu     sync.RWMutex
	rate   rate.Limit
	burst  int
	now    func() time.Time
	byAddr map[string]*addrLimiter
	sweep  time.Time
}

type addrLimiter struct {
	lim  *rate.Limiter
	seen time.Time
}

func newLimiters(r float64, burst int, now func() time.Time) *limiters {
	return &limiters{rate: rate.Limit(r), burst: burst, now: now, byAddr: map[string]*addrLimiter{}}
}

// lookup returns addr's bucket, or nil when it has none.
func (l *limiters) lookup(addr string) *rate.Limiter {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if a, ok := l.byAddr[addr]; ok {
		return a.lim
	}
	return nil
}

// get returns addr's bucket, making it when addr has none, and marks addr
// as seen.
func (l *limiters) get(addr string) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if now.Sub(l.sweep) > time.Minute {
		idle := time.Duration(float64(l.burst)/float64(l.rate)*float64(time.Second)) + time.Minute
		for k, v := range l.byAddr {
			if now.Sub(v.seen) > idle {
				delete(l.byAddr, k)
			}
		}
		l.sweep = now
	}
	a, ok := l.byAddr[addr]
	if !ok {
		a = &addrLimiter{lim: rate.NewLimiter(l.rate, l.burst)}
		l.byAddr[addr] = a
	}
	a.seen = now
	return a.lim
}

// exhausted reports whether addr has no token left, without spending one.
func (l *limiters) exhausted(addr string) bool {
	lim := l.lookup(addr)
	return lim != nil && lim.TokensAt(l.now()) < 1
}

// spend takes one token from addr's bucket.
func (l *limiters) spend(addr string) {
	l.get(addr).AllowN(l.now(), 1)
}

// allow takes one token and reports whether there was one.
func (l *limiters) allow(addr string) bool {
	return l.get(addr).AllowN(l.now(), 1)
}

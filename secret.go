package sandgate

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"
)

// Secrets are values a run uses without holding them: the gateway keeps
// them encrypted, a run asks for one by name (RunSpec.Secrets), its
// sandbox sees a placeholder in an environment variable, and the egress
// proxy writes the value into the requests the run sends to the
// destinations the bundle's data names for it (docs/secrets.md).

// The bounds of secrets.
const (
	// MaxSecretValueBytes is the largest secret value.
	MaxSecretValueBytes = 64 << 10
	// MaxSecrets is how many secrets a run may ask for.
	MaxSecrets = 16
)

// secretName is the form of a secret's name: what the bundle's data, a
// run spec and the API's path name it by.
var secretName = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)

// CheckSecretName refuses a name outside [a-z0-9_-]{1,64}, as an
// INVALID-REQUEST naming field.
func CheckSecretName(field, name string) error {
	if !secretName.MatchString(name) {
		return FieldError(field, "%q is not a secret name: 1 to 64 of a-z, 0-9, '_' and '-'", shortKey(name))
	}
	return nil
}

// CheckSecretValue refuses a value that cannot be a secret: empty, over
// MaxSecretValueBytes, not UTF-8, or holding a control character other
// than a tab (the proxy writes values into request headers, where a line
// break would start a header of the value's choosing). The error is an
// INVALID-REQUEST naming "value" and never quotes the value.
func CheckSecretValue(v string) error {
	switch {
	case v == "":
		return FieldError("value", "is required: the secret's value, not empty")
	case len(v) > MaxSecretValueBytes:
		return FieldError("value", "is %d bytes long; at most %d are allowed", len(v), MaxSecretValueBytes)
	case !utf8.ValidString(v):
		return FieldError("value", "is not UTF-8")
	}
	for i, r := range v {
		if (r < 0x20 && r != '\t') || r == 0x7f {
			return FieldError("value", "holds a control character at byte %d: a secret is written into a request header, which cannot carry one", i)
		}
	}
	return nil
}

// normalizeSecrets checks the names a spec asks for: each a secret name,
// none twice.
func normalizeSecrets(names []string) error {
	seen := make(map[string]int, len(names))
	for i, n := range names {
		field := fmt.Sprintf("secrets[%d]", i)
		if err := CheckSecretName(field, n); err != nil {
			return err
		}
		if j, ok := seen[n]; ok {
			return FieldError(field, "%s is also secrets[%d]", n, j)
		}
		seen[n] = i
	}
	return nil
}

// SecretPlaceholderPrefix begins every placeholder: what a sandbox holds
// in place of a secret's value.
const SecretPlaceholderPrefix = "sandgate-secret:"

// SecretPlaceholder is the placeholder of secret name in the run whose
// nonce is nonce: "sandgate-secret:<name>:<nonce>".
func SecretPlaceholder(name, nonce string) string {
	return SecretPlaceholderPrefix + name + ":" + nonce
}

// SecretBinding is where the bundle's data lets a secret go
// (data.sandgate.config.secrets.<name>): which teams' runs may use it,
// the destinations the proxy writes it to, the request header it writes
// and its format, and the environment variable that holds the
// placeholder in the sandbox.
type SecretBinding struct {
	Name  string   `json:"name"`
	Teams []string `json:"teams"`
	// Destinations are egress destinations in their normalised form
	// ("host:port", "*.domain:port", …).
	Destinations []string `json:"destinations"`
	// Header is the request header the proxy writes ("Authorization").
	Header string `json:"header"`
	// Format is the header's value with "{value}" where the secret goes
	// ("Bearer {value}").
	Format string `json:"format"`
	// Env is the environment variable that holds the placeholder.
	Env string `json:"env"`
}

// SecretFormatValue is what a binding's Format holds where the value goes.
const SecretFormatValue = "{value}"

// HeaderValue is b's header value for value.
func (b SecretBinding) HeaderValue(value string) string {
	return strings.Replace(b.Format, SecretFormatValue, value, 1)
}

// SecretState is what the policy input says of a stored secret a request
// names (input.secrets.<name>): a name absent from input.secrets is not
// stored.
type SecretState struct {
	Version int64 `json:"version"`
}

// SecretInfo is what may be shown of a stored secret: never its value,
// only its name, its version, the keyed hash of its value, the key it is
// encrypted under, and who set it when.
type SecretInfo struct {
	Name    string `json:"name"`
	Version int64  `json:"version"`
	// ValueHash is the value's keyed hash (MaskHash): equal values have
	// equal hashes, so an auditor sees a value reused without seeing it.
	ValueHash string `json:"value_hash"`
	// KeyID names the key-encryption key the value's data key is wrapped
	// under.
	KeyID string    `json:"key_id"`
	SetBy string    `json:"set_by"`
	SetAt time.Time `json:"set_at"`
	// CreatedBy and CreatedAt are of the secret's first version.
	CreatedBy string    `json:"created_by"`
	CreatedAt time.Time `json:"created_at"`
}

// SealedSecret is a stored secret as the store keeps it: the value
// encrypted under a data key of its own (AES-256-GCM), the data key
// wrapped under a key-encryption key (AES-256-GCM), both bound to the
// name and version.
type SealedSecret struct {
	SecretInfo
	// WrappedKey is the data key's nonce and ciphertext under KeyID.
	WrappedKey []byte
	// Ciphertext is the value's nonce and ciphertext under the data key.
	Ciphertext []byte
}

// SecretStore keeps sealed secrets. Its methods return UNAVAILABLE when
// the database cannot answer.
type SecretStore interface {
	// PutSecret stores a new version of name in one transaction: seal is
	// called with the version the secret will have (1 for a name never
	// stored, one more than the last otherwise, a deleted one included)
	// and the version stored now (nil when none is), and returns the row
	// to store; an error from seal rolls back and is returned as it is.
	PutSecret(ctx context.Context, name string, seal func(version int64, prev *SecretInfo) (SealedSecret, error)) error
	// ListSecrets is every stored secret, by name.
	ListSecrets(ctx context.Context) ([]SecretInfo, error)
	// SealedSecrets are the stored secrets among names.
	SealedSecrets(ctx context.Context, names []string) ([]SealedSecret, error)
	// DeleteSecret removes name's value in one transaction, calling done
	// with what it removes before it commits; an error from done rolls
	// back. NOT-FOUND when no version is stored.
	DeleteSecret(ctx context.Context, name string, done func(SecretInfo) error) error
	// RewrapSecrets calls rewrap with every stored secret, each under a
	// row lock, and stores the row it returns when changed is true. It
	// returns how many it changed.
	RewrapSecrets(ctx context.Context, rewrap func(SealedSecret) (s SealedSecret, changed bool, err error)) (int, error)
}

// SecretValue is a secret's value in the clear. It prints, logs and
// encodes as "[secret]": only Reveal gives the value, and only the egress
// proxy calls it.
type SecretValue struct{ v string }

// NewSecretValue wraps v.
func NewSecretValue(v string) SecretValue { return SecretValue{v} }

// Reveal is the value.
func (s SecretValue) Reveal() string { return s.v }

const secretShown = "[secret]"

// String hides the value.
func (SecretValue) String() string { return secretShown }

// GoString hides the value from %#v.
func (SecretValue) GoString() string { return secretShown }

// MarshalJSON hides the value.
func (SecretValue) MarshalJSON() ([]byte, error) { return []byte(`"` + secretShown + `"`), nil }

// MarshalText hides the value.
func (SecretValue) MarshalText() ([]byte, error) { return []byte(secretShown), nil }

// LogValue hides the value from slog.
func (SecretValue) LogValue() slog.Value { return slog.StringValue(secretShown) }

// RunSecret is a secret as a run uses it: its binding from the decision
// that admitted the run, its stored version and its value.
type RunSecret struct {
	SecretBinding
	Version int64
	Value   SecretValue
}

package gateway

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// SecretVault keeps the secrets runs use through the egress proxy
// (package secrets' Vault). Its errors are *sandgate.Error: INVALID-
// REQUEST naming "name" or "value", NOT-FOUND, AUDIT-UNAVAILABLE (the
// change is then not made), UNAVAILABLE.
type SecretVault interface {
	// Put stores value as name's next version, set by s's actor; created
	// says it is the secret's first (or first since its removal).
	Put(ctx context.Context, s sandgate.Subject, name, value string) (info sandgate.SecretInfo, created bool, err error)
	// List is every stored secret, without values.
	List(ctx context.Context) ([]sandgate.SecretInfo, error)
	// Delete removes name's value, by s's actor.
	Delete(ctx context.Context, s sandgate.Subject, name string) error
	// States are the stored secrets among names (the gate's input).
	States(ctx context.Context, names []string) (map[string]sandgate.SecretState, error)
	// Reveal is the values of the secrets bindings name, for a run's
	// egress proxy.
	Reveal(ctx context.Context, bindings []sandgate.SecretBinding) ([]sandgate.RunSecret, error)
}

// secretRoutes are /v1/secrets: write-only. No answer, log line or
// error of theirs holds a value.
type secretRoutes struct{ *web }

// MaxSecretBodyBytes bounds the body of PUT /v1/secrets/{name}: room for
// the largest value, escaped; past it the answer is TOO-LARGE.
const MaxSecretBodyBytes = 1 << 20

func (s secretRoutes) vault() (SecretVault, error) {
	if s.d.Secrets == nil {
		return nil, sandgate.Errorf(sandgate.CodeNotFound, "this gateway keeps no secrets (it has no SANDGATE_SECRETS_KEY_FILE)")
	}
	return s.d.Secrets, nil
}

// putSecret is PUT /v1/secrets/{name}: 201 for a first value, 200 for a
// new version.
func (s secretRoutes) putSecret(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	v, err := s.vault()
	if err != nil {
		return err
	}
	name := c.Param("name")
	if err := sandgate.CheckSecretName("name", name); err != nil {
		return err
	}
	if err := requireJSON(c); err != nil {
		return err
	}
	var body api.SecretPut
	if err := sandgate.DecodeStrict(c.Request().Body, &body, MaxSecretBodyBytes); err != nil {
		return err
	}
	if body.Value == nil {
		return sandgate.FieldError("value", "is required: the secret's value")
	}
	p := principal(c)
	info, created, err := v.Put(c.Request().Context(), sandgate.PrincipalSubject(p, correlationID(c), s.cfg.Node), name, *body.Value)
	if err != nil {
		return err
	}
	status, what := http.StatusOK, "secret rotated"
	if created {
		status, what = http.StatusCreated, "secret set"
	}
	s.logger(c).Info(what, "secret", name, "version", info.Version, "value_hash", info.ValueHash, "actor", p.Name)
	return c.JSON(status, info)
}

// listSecrets is GET /v1/secrets.
func (s secretRoutes) listSecrets(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	v, err := s.vault()
	if err != nil {
		return err
	}
	list, err := v.List(c.Request().Context())
	if err != nil {
		return err
	}
	if list == nil {
		list = []sandgate.SecretInfo{}
	}
	return c.JSON(http.StatusOK, api.SecretList{Secrets: list})
}

// deleteSecret is DELETE /v1/secrets/{name}.
func (s secretRoutes) deleteSecret(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	v, err := s.vault()
	if err != nil {
		return err
	}
	name := c.Param("name")
	if err := sandgate.CheckSecretName("name", name); err != nil {
		return err
	}
	p := principal(c)
	if err := v.Delete(c.Request().Context(), sandgate.PrincipalSubject(p, correlationID(c), s.cfg.Node), name); err != nil {
		return err
	}
	s.logger(c).Info("secret deleted", "secret", name, "actor", p.Name)
	return c.NoContent(http.StatusNoContent)
}

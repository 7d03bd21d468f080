package sandgate

import "context"

// The ways a principal signs in (SignIn.Method).
const (
	// MethodToken is a bearer token of the tokens file.
	MethodToken = "token"
	// MethodOIDC is an OpenID Connect token (a JWT) from a configured
	// issuer, or the console's session made by the authorization code
	// flow.
	MethodOIDC = "oidc"
	// MethodMTLS is a client certificate verified against the TLS
	// listener's client CA.
	MethodMTLS = "mtls"
)

// SignIn is how a principal authenticated: the method and, for oidc and
// mtls, who vouched for it and whom it names. It is recorded with every
// event the principal's requests cause, its Subject and Email as keyed
// hashes when the policy bundle's data says so (mask_sign_in).
type SignIn struct {
	// Method is MethodToken, MethodOIDC or MethodMTLS.
	Method string `json:"method"`
	// Issuer is the OIDC issuer, or the certificate's issuer's
	// distinguished name.
	Issuer string `json:"issuer,omitempty"`
	// Subject is the token's sub claim, or the certificate's subject's
	// distinguished name.
	Subject string `json:"subject,omitempty"`
	// Email is the token's email claim, or the certificate's first email
	// address.
	Email string `json:"email,omitempty"`
}

// SignInToken is how a principal of the tokens file signed in.
var SignInToken = SignIn{Method: MethodToken}

// Doc is s as a JSON document of the trail, with the principal's name
// when name is not "".
func (s SignIn) Doc(name string) map[string]any {
	d := map[string]any{"method": s.Method}
	if name != "" {
		d["name"] = name
	}
	if s.Issuer != "" {
		d["issuer"] = s.Issuer
	}
	if s.Subject != "" {
		d["subject"] = s.Subject
	}
	if s.Email != "" {
		d["email"] = s.Email
	}
	return d
}

// Masked is s with the fields paths name ("subject", "email", "issuer")
// replaced by their keyed hashes under m: the form the trail and the
// stores keep.
func (s SignIn) Masked(m Masker, paths []string) SignIn {
	for _, p := range paths {
		switch p {
		case "subject":
			s.Subject = hashNonEmpty(m, s.Subject)
		case "email":
			s.Email = hashNonEmpty(m, s.Email)
		case "issuer":
			s.Issuer = hashNonEmpty(m, s.Issuer)
		}
	}
	return s
}

func hashNonEmpty(m Masker, v string) string {
	if v == "" {
		return ""
	}
	return m.Hash(v)
}

// SignInFields are the fields of a SignIn that data mask_sign_in may name.
var SignInFields = []string{"issuer", "subject", "email"}

// Identity is a verified sign-in before it is a principal: what the
// bundle's data.sandgate.authz.principal rule maps to a name, a team and
// roles.
type Identity struct {
	// Method is MethodOIDC or MethodMTLS.
	Method string `json:"method"`
	// Issuer is the token's issuer, or the certificate's issuer's
	// distinguished name.
	Issuer string `json:"issuer"`
	// Claims are the token's claims; for a certificate, claims made from
	// it: sub (the subject's distinguished name), cn, email (the first
	// email address), team (the first organization), roles (the
	// organizational units).
	Claims map[string]any `json:"claims"`
	// Certificate describes a client certificate (mtls only).
	Certificate *CertificateInfo `json:"certificate,omitempty"`
}

// CertificateInfo is what a client certificate says of its holder, as
// the principal rule sees it.
type CertificateInfo struct {
	Subject            string   `json:"subject"`
	CommonName         string   `json:"common_name"`
	Organization       []string `json:"organization"`
	OrganizationalUnit []string `json:"organizational_unit"`
	Issuer             string   `json:"issuer"`
	Serial             string   `json:"serial"`
	DNSNames           []string `json:"dns_names"`
	EmailAddresses     []string `json:"email_addresses"`
	URIs               []string `json:"uris"`
}

// Action is what a principal asks to do, as data.sandgate.authz judges
// it: "run.create", "run.read", "run.cancel", "approval.approve", …
type Action string

// AuthzObject is what an action is on: its kind and, for an object that
// exists, its ID, its team and the principal who made it.
type AuthzObject struct {
	Kind string `json:"kind"`
	ID   string `json:"id,omitempty"`
	// Team is the object's team; "" for an object of no team (the
	// policy, the trail).
	Team string `json:"team,omitempty"`
	// Principal is who made the object (a run's or an approval's
	// requester).
	Principal string `json:"principal,omitempty"`
}

// AuthzRequest is one question: may Principal do Action on Object?
type AuthzRequest struct {
	Principal Principal   `json:"principal"`
	SignIn    SignIn      `json:"sign_in"`
	Action    Action      `json:"action"`
	Object    AuthzObject `json:"object"`
}

// AuthzDecision is the bundle's answer to an AuthzRequest.
type AuthzDecision struct {
	Allow bool `json:"allow"`
	// AllTeams says the principal may do the action on every team's
	// objects (a list then shows them all).
	AllTeams bool `json:"all_teams"`
	// Rule names the rule that decided: the one that allowed, or the one
	// that denied.
	Rule    string `json:"rule"`
	Message string `json:"message,omitempty"`
}

// Err is the FORBIDDEN error of a denial, naming its rule.
func (d AuthzDecision) Err(a Action) error {
	msg := d.Message
	if msg == "" {
		msg = "not allowed to " + string(a)
	}
	return &Error{Code: CodeForbidden, Message: msg,
		Details: map[string]any{"action": string(a), "rule": d.Rule}}
}

// Authorizer answers who is who and who may do what, from the policy
// bundle in force. It is implemented by the policy engine.
type Authorizer interface {
	// MapPrincipal maps a verified identity to its principal through
	// data.sandgate.authz.principal. An identity the rule does not map
	// is FORBIDDEN with the reason.
	MapPrincipal(ctx context.Context, id Identity) (Principal, error)
	// Authorize decides one request with data.sandgate.authz.decision;
	// an undefined or failed evaluation is a denial that says so.
	Authorize(ctx context.Context, r AuthzRequest) AuthzDecision
}

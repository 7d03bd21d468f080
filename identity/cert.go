package identity

import (
	"crypto/x509"

	"github.com/sandgate/sandgate"
)

// Certificate is a client certificate the TLS listener verified against
// its client CA, made into what the principal rule maps: claims in the
// shape a token's have (sub the common name, else the subject's
// distinguished name; email the first email address; team the first
// organization; roles the organizational units) and the certificate's
// details beside them.
func Certificate(cert *x509.Certificate) (sandgate.Identity, sandgate.SignIn) {
	info := &sandgate.CertificateInfo{
		Subject:            cert.Subject.String(),
		CommonName:         cert.Subject.CommonName,
		Organization:       orEmpty(cert.Subject.Organization),
		OrganizationalUnit: orEmpty(cert.Subject.OrganizationalUnit),
		Issuer:             cert.Issuer.String(),
		Serial:             cert.SerialNumber.String(),
		DNSNames:           orEmpty(cert.DNSNames),
		EmailAddresses:     orEmpty(cert.EmailAddresses),
		URIs:               []string{},
	}
	for _, u := range cert.URIs {
		info.URIs = append(info.URIs, u.String())
	}
	sub := cert.Subject.CommonName
	if sub == "" {
		sub = info.Subject
	}
	claims := map[string]any{"sub": sub, "cn": cert.Subject.CommonName}
	email := ""
	if len(cert.EmailAddresses) > 0 {
		email = cert.EmailAddresses[0]
		claims["email"] = email
	}
	if len(cert.Subject.Organization) > 0 {
		claims["team"] = cert.Subject.Organization[0]
	}
	roles := make([]any, 0, len(cert.Subject.OrganizationalUnit))
	for _, ou := range cert.Subject.OrganizationalUnit {
		roles = append(roles, ou)
	}
	claims["roles"] = roles
	id := sandgate.Identity{Method: sandgate.MethodMTLS, Issuer: info.Issuer, Claims: claims, Certificate: info}
	return id, sandgate.SignIn{Method: sandgate.MethodMTLS, Issuer: info.Issuer, Subject: info.Subject, Email: email}
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

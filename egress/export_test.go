package egress

import "crypto/tls"

// IssueForTest issues ca's certificate for host: tests make their
// upstreams' certificates with it.
func IssueForTest(ca *RunCA, host string) (*tls.Certificate, error) { return ca.leaf(host) }

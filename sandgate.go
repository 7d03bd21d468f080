// Package sandgate holds the domain of the sandgate admission gateway: the
// run spec and its normalisation, policy decisions, runs and their outcomes,
// audit events, the one error type with its codes, and the small interfaces
// where the gateway, the policy engine, the audit trail and the executor meet.
//
// It depends on nothing but the standard library. Each boundary lives in its
// own package that wraps one dependency: gateway (echo), policies (OPA),
// executor (Docker), audit (gorm and pgx).
package sandgate

import "time"

// Version is the build's version, set with -ldflags at build time.
var Version = "dev"

// Clock returns the current time. Parts that record time take one so tests
// can pin it.
type Clock func() time.Time

// IDSource returns a new unique ID (a UUIDv7 in production).
type IDSource func() string

// Label keys sandgate puts on every container it manages.
const (
	LabelManaged       = "sandgate.managed"
	LabelRunID         = "sandgate.run-id"
	LabelSession       = "sandgate.session"
	LabelTask          = "sandgate.task"
	LabelCorrelationID = "sandgate.correlation-id"
	LabelNode          = "sandgate.node"
)

package sinks

import (
	"context"
	"fmt"

	"github.com/sandgate/sandgate"
)

// Sender delivers batches of audit records to one receiver. Deliver
// returns nil only once the receiver acknowledged the whole batch (for
// syslog: every byte written and the connection still open; for a
// webhook: a 2xx answer); otherwise the caller sends the same batch
// again. It is called from one goroutine at a time.
type Sender interface {
	Deliver(ctx context.Context, recs []sandgate.AuditRecord) error
	Close() error
}

// New returns the sender of a checked Spec (from Parse). productVersion
// is sandgate's version, for OCSF's metadata.product.
func New(s Spec, productVersion string) (Sender, error) {
	enc, err := NewEncoder(s.Format, productVersion)
	if err != nil {
		return nil, err
	}
	switch s.Type {
	case TypeSyslog:
		return newSyslog(s, enc)
	case TypeWebhook:
		return newWebhook(s, enc)
	}
	return nil, fmt.Errorf("sinks: unknown type %q", s.Type)
}

package admission

import (
	"context"
	"time"

	"github.com/sandgate/sandgate"
)

// PortLink admits a link to a session's port for a browser (the console's
// "open preview"): the same question as a connection to the port (the
// session open, the principal allowed its port, the port admitted for
// the session's team), asked when the link is made and recorded as its
// decision with the link's expiry. No connection is opened: each request
// through the link is admitted again as a Port, as its principal.
type PortLink struct {
	none
	Session string
	Port    int
	// Expires is when the link stops working.
	Expires time.Time
}

func (PortLink) operation() string { return "port_link" }

func (o PortLink) target(ctx context.Context, p *pass) error {
	return Port{Session: o.Session, Port: o.Port}.target(ctx, p)
}

func (o PortLink) normalize(ctx context.Context, p *pass) error {
	return Port{Session: o.Session, Port: o.Port}.normalize(ctx, p)
}

func (PortLink) decide(ctx context.Context, p *pass) error { return p.decide(ctx) }

func (o PortLink) record(ctx context.Context, p *pass) error {
	return p.commit(ctx, nil, p.via(map[string]any{"operation": string(sandgate.OperationPort), "session_id": o.Session, "port": o.Port,
		"link": true, "link_expires_at": o.Expires.UTC().Format(time.RFC3339)}))
}

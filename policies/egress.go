package policies

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/sandgate/sandgate"
)

// EgressQuery is the per-connection decision of egress runs.
const EgressQuery = "data.sandgate.egress.decision"

var _ sandgate.EgressDecider = (*Engine)(nil)

// checkEgressData refuses egress data of the wrong shape: a destination
// the rules would never match would deny quietly, a mistyped prefix could
// open more than meant.
func (b *bundle) checkEgressData() error {
	cfg := b.config()
	var dests perTeam[[]string]
	if err := dataField(cfg, "egress_destinations", &dests); err != nil {
		return err
	}
	for team, list := range dests.all() {
		for _, d := range list {
			parsed, err := sandgate.ParseEgressDestination(d)
			if err != nil {
				return fmt.Errorf("data.sandgate.config.egress_destinations.%s: %s", team, err)
			}
			if parsed.String() != d {
				return fmt.Errorf("data.sandgate.config.egress_destinations.%s: %q is not in its normalised form %q", team, d, parsed.String())
			}
		}
	}
	var private perTeam[[]string]
	if err := dataField(cfg, "egress_private_cidrs", &private); err != nil {
		return err
	}
	var blocked []string
	if err := dataField(cfg, "egress_blocked_cidrs", &blocked); err != nil {
		return err
	}
	lists := private.all()
	lists["blocked"] = blocked
	for key, list := range lists {
		for _, c := range list {
			if _, err := netip.ParsePrefix(c); err != nil {
				return fmt.Errorf("data.sandgate.config egress CIDRs %s: %q is not a CIDR prefix", key, c)
			}
		}
	}
	var max sandgate.EgressLimits
	if err := dataField(cfg, "egress_limits_max", &max); err != nil {
		return err
	}
	return nil
}

// prepareEgress prepares the egress decision query of a compiled bundle.
func prepareEgress(ctx context.Context, compiler *ast.Compiler, opts ...func(*rego.Rego)) (rego.PreparedEvalQuery, error) {
	return rego.New(append([]func(*rego.Rego){rego.Query(EgressQuery), rego.Compiler(compiler), rego.StrictBuiltinErrors(true)}, opts...)...).PrepareForEval(ctx)
}

// DecideEgress evaluates data.sandgate.egress.decision for one
// connection of an egress run. No policy, an evaluation error or an
// undefined or malformed decision refuses, with the reason.
func (e *Engine) DecideEgress(ctx context.Context, in sandgate.EgressInput) sandgate.EgressDecision {
	p := e.current.Load()
	if p == nil {
		return sandgate.EgressDecision{Reasons: []string{"no policy is loaded"}}
	}
	d := sandgate.EgressDecision{PolicyRevision: p.revision}
	addrs := make([]any, len(in.Addresses))
	for i, a := range in.Addresses {
		addrs[i] = a
	}
	egress := make([]any, len(in.Egress))
	for i, a := range in.Egress {
		egress[i] = a
	}
	input, err := ast.InterfaceToValue(map[string]any{
		"run_id": in.RunID, "principal": in.Principal, "team": in.Team, "host": in.Host,
		"port": in.Port, "addresses": addrs, "egress": egress, "air_gapped": e.settings.AirGapped,
	})
	if err != nil {
		d.Reasons = []string{"the egress input cannot be built: " + err.Error()}
		return d
	}
	rs, err := p.egress.Eval(ctx, rego.EvalParsedInput(input), rego.EvalTime(e.now()), evalNoMetrics)
	if err != nil {
		d.Reasons = []string{"egress policy evaluation failed: " + err.Error()}
		return d
	}
	if len(rs) == 0 || len(rs[0].Expressions) == 0 {
		d.Reasons = []string{EgressQuery + " is undefined"}
		return d
	}
	out, ok := rs[0].Expressions[0].Value.(map[string]any)
	allow, okAllow := out["allow"].(bool)
	reasons, okReasons := out["reasons"].([]any)
	if !ok || !okAllow || !okReasons {
		d.Reasons = []string{"the egress decision is malformed: want {allow: bool, reasons: [string]}"}
		return d
	}
	for _, r := range reasons {
		if s, ok := r.(string); ok {
			d.Reasons = append(d.Reasons, truncateMessage(s))
		}
	}
	d.Allow = allow && len(d.Reasons) == 0
	if !allow && len(d.Reasons) == 0 {
		d.Reasons = []string{"the egress policy refused without a reason"}
	}
	return d
}

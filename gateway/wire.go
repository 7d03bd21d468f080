package gateway

import (
	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// The wire types are package api's; the functions below turn the domain
// types into them, so that the domain can change without changing the API.

func runView(r *sandgate.Run) api.RunView {
	v := api.RunView{
		ID: r.ID, CorrelationID: r.CorrelationID, DecisionID: r.DecisionID,
		PolicyRevision: r.PolicyRevision, Principal: r.Principal, Team: r.Team, Node: r.Node,
		State: r.State, ExitCode: r.ExitCode, OOMKilled: r.OOMKilled, Error: r.Error,
		ContainerID: r.ContainerID, CreatedAt: r.CreatedAt, StartedAt: r.StartedAt,
		FinishedAt: r.FinishedAt, DurationMS: r.DurationMS,
		Stdout: outputView(r.Stdout), Stderr: outputView(r.Stderr),
		Spec: r.Spec, Warnings: r.Warnings, Artifacts: r.Artifacts, Usage: r.Usage,
		Egress: r.Egress,
	}
	if r.Outcome != "" {
		o := r.Outcome
		v.Outcome = &o
	}
	if v.Warnings == nil {
		v.Warnings = []string{}
	}
	return v
}

func outputView(o sandgate.Output) api.OutputView {
	enc := o.Encoding
	if enc == "" {
		enc = "utf-8"
	}
	return api.OutputView{Data: o.Data, Encoding: enc, Bytes: o.Bytes, Truncated: o.Truncated, SHA256: o.SHA256}
}

func decisionView(d sandgate.Decision, withSpec bool) api.DecisionView {
	v := api.DecisionView{
		Allow: d.Allow, Violations: d.Violations, Warnings: d.Warnings, Mutations: d.Mutations,
		PolicyRevision: d.PolicyRevision, DecisionID: d.DecisionID,
	}
	if v.Violations == nil {
		v.Violations = []sandgate.Violation{}
	}
	if v.Warnings == nil {
		v.Warnings = []sandgate.Violation{}
	}
	if v.Mutations == nil {
		v.Mutations = []sandgate.Mutation{}
	}
	if withSpec {
		s := d.Spec.RunSpec
		v.Spec = &s
	}
	return v
}

func exitData(r *sandgate.Run) api.ExitData {
	return api.ExitData{
		State: sandgate.StateFinished, Outcome: r.Outcome, ExitCode: r.ExitCode, OOMKilled: r.OOMKilled,
		Error: r.Error, DurationMS: r.DurationMS,
		Stdout: api.StreamTotals{Bytes: r.Stdout.Bytes, Truncated: r.Stdout.Truncated},
		Stderr: api.StreamTotals{Bytes: r.Stderr.Bytes, Truncated: r.Stderr.Truncated},
		Usage:  r.Usage,
	}
}

func cursorPtr(c string) *string {
	if c == "" {
		return nil
	}
	return &c
}

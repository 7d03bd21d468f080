package policies

import (
	"context"
	"io"
	"slices"

	"github.com/sandgate/sandgate"
)

// check loads files, read from source, in a child as a reload would, its
// tests included, and ends the child: nil when the bundle would load,
// its POLICY-INVALID refusal (or its limit's) otherwise.
func (ev *Evaluator) check(ctx context.Context, source string, files []bundleFile) error {
	p, err := ev.start(ctx)
	if err != nil {
		return err
	}
	defer p.Close()
	var resp evalResponse
	return p.call(ctx, evalRequest{Op: "load", Source: source, Files: evalFiles(files)}, &resp)
}

// loadCandidate loads files as a candidate in a child that ends with ctx
// or Close; its decisions carry the times and decision IDs of e.
func (ev *Evaluator) loadCandidate(ctx context.Context, files []bundleFile, e *Engine) (*remoteCandidate, error) {
	p, err := ev.start(ctx)
	if err != nil {
		return nil, err
	}
	var resp evalResponse
	if err := p.call(ctx, evalRequest{Op: "load", Source: CandidateSource, Files: evalFiles(files)}, &resp); err != nil {
		p.Close()
		return nil, err
	}
	if resp.Mask == nil {
		resp.Mask = []string{}
	}
	return &remoteCandidate{p: p, e: e, revision: resp.Revision, mask: resp.Mask, modules: resp.Modules}, nil
}

func evalFiles(files []bundleFile) []evalFile {
	out := make([]evalFile, 0, len(files))
	for _, f := range files {
		out = append(out, evalFile{Name: f.name, Data: f.data})
	}
	return out
}

// remoteCandidate is a candidate loaded in an evaluator's child: the
// child decides, this process sends it the inputs and reads the
// decisions back. It is safe for concurrent use (one decision at a time).
type remoteCandidate struct {
	p        *evalProcess
	e        *Engine
	revision string
	mask     []string
	modules  []sandgate.PolicyModule
}

var (
	_ sandgate.PolicyCandidate = (*remoteCandidate)(nil)
	_ io.Closer                = (*remoteCandidate)(nil)
)

// Revision is the candidate's revision, as the child computed it.
func (c *remoteCandidate) Revision() string { return c.revision }

// Mask lists the spec fields the candidate's mask rules name.
func (c *remoteCandidate) Mask() []string { return slices.Clone(c.mask) }

// Modules are the candidate's files with their SHA-256.
func (c *remoteCandidate) Modules() []sandgate.PolicyModule { return slices.Clone(c.modules) }

// Decide has the child evaluate in as Candidate.Decide does, at the
// engine's time and with its decision ID. Beyond ctx's end, its error is
// POLICY-INVALID when the evaluation used one of the child's limits
// (Details["limit"] names it; the child is gone, and every later call
// returns the same), or UNAVAILABLE when the child failed otherwise.
func (c *remoteCandidate) Decide(ctx context.Context, in sandgate.AdmissionInput) (sandgate.Decision, error) {
	if err := ctx.Err(); err != nil {
		return sandgate.Decision{}, err
	}
	var resp evalResponse
	req := evalRequest{Op: "decide", Input: &in, Now: c.e.now(), DecisionID: c.e.newID()}
	if err := c.p.call(ctx, req, &resp); err != nil {
		return sandgate.Decision{}, err
	}
	if resp.Decision == nil {
		return sandgate.Decision{}, sandgate.Errorf(sandgate.CodeUnavailable, "the policy evaluator answered no decision")
	}
	d := *resp.Decision
	if resp.Enforcement != nil {
		d.Enforcement = resp.Enforcement.enforcement()
	}
	return d, nil
}

// Close ends the child.
func (c *remoteCandidate) Close() error { return c.p.Close() }

package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/client"
	"github.com/sandgate/sandgate/policies"
)

// exitReplayChanged: `policy replay --fail-on-change` found decisions
// that would change.
const exitReplayChanged = 3

// newPolicyReplayCmd builds `sandgate policy replay`: the gateway
// replays its recorded decisions with a candidate bundle read here.
func newPolicyReplayCmd(a *app) *cobra.Command {
	var (
		bundle, since, until string
		o                    client.ReplayOptions
		failOnChange         bool
		out                  *outputFormat
	)
	cmd := &cobra.Command{
		Use:   "replay --bundle DIR",
		Short: "Replay the recorded decisions with a candidate bundle: what would change",
		Long: `Send the candidate bundle in DIR to the gateway (SANDGATE_URL, token from
SANDGATE_TOKEN, role security or admin), which compiles and tests it as a
reload would, re-evaluates the recorded admission inputs of past runs and
reviews with it, and answers the decisions that would change: newly denied,
newly allowed, and still denied by other rules, grouped by rule with
examples. Nothing runs and nothing is put in force; the gateway records the
replay in the audit trail (policy.replayed).

--since and --until take an RFC 3339 time or a duration back from now (24h).
Exit status: 0 replayed, 2 the gateway refused the bundle, 3 with
--fail-on-change when any decision would change, 1 any other error.`,
		Example: `  sandgate policy replay --bundle ./policies --since 720h
  sandgate policy replay --bundle ./policies --team payments -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if bundle == "" {
				return errors.New("--bundle is required")
			}
			var err error
			if o.Since, err = parseWhen(since); err != nil {
				return fmt.Errorf("--since: %w", err)
			}
			if o.Until, err = parseWhen(until); err != nil {
				return fmt.Errorf("--until: %w", err)
			}
			files, err := policies.BundleFiles(bundle)
			if err != nil {
				return policyInvalid(a.stderr, err)
			}
			c, err := a.newClient()
			if err != nil {
				return err
			}
			rep, err := c.ReplayPolicy(cmd.Context(), files, o)
			if err != nil {
				return replayError(a, err)
			}
			if out.JSON() {
				err = writeJSON(a, rep)
			} else {
				err = writeReplay(a.stdout, rep)
			}
			if err != nil {
				return err
			}
			if failOnChange && rep.NewlyDenied.Count+rep.NewlyAllowed.Count+rep.Changed.Count > 0 {
				return &ExitError{Code: exitReplayChanged, Message: fmt.Sprintf("%d decisions would change",
					rep.NewlyDenied.Count+rep.NewlyAllowed.Count+rep.Changed.Count)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&bundle, "bundle", "", "candidate bundle directory (*.rego, *_test.rego, *.json)")
	f.StringVar(&since, "since", "", "replay decisions recorded at or after this time or duration ago")
	f.StringVar(&until, "until", "", "replay decisions recorded before this time or duration ago")
	f.StringVar(&o.Team, "team", "", "replay this team's decisions only")
	f.IntVar(&o.Limit, "limit", 0, "the most decisions to replay, oldest first (default and maximum: the gateway's)")
	f.IntVar(&o.Examples, "examples", 0, "examples per rule (default 3, at most 20)")
	f.BoolVar(&o.Drift, "drift", false, "also compare the records with the policy in force (what a replay cannot reproduce)")
	f.BoolVar(&failOnChange, "fail-on-change", false, "exit 3 when any decision would change")
	out = bindOutput(cmd)
	return cmd
}

// replayError prints the problems of a bundle the gateway refused and
// exits 2; other errors as every API command does.
func replayError(a *app, err error) error {
	var se *sandgate.Error
	if !errors.As(err, &se) || se.Code != sandgate.CodePolicyInvalid {
		return clientError(a, err)
	}
	errs, _ := se.Details["errors"].([]any)
	for _, e := range errs {
		fmt.Fprintln(a.stderr, e)
	}
	return &ExitError{Code: exitPolicyInvalid, Message: fmt.Sprintf("the gateway refused the candidate bundle: %d problem(s)", len(errs))}
}

// writeReplay prints a replay's report for a person: the counts, then
// each kind of change by rule with its examples.
func writeReplay(w io.Writer, rep api.ReplayReport) error {
	fmt.Fprintf(w, "candidate %s (in force: %s)\n", rep.CandidateRevision, rep.CurrentRevision)
	fmt.Fprintf(w, "replayed %d decisions in %s: %d unchanged, %d newly denied, %d newly allowed, %d denied by other rules\n",
		rep.Replayed, time.Duration(rep.DurationMS)*time.Millisecond, rep.Unchanged,
		rep.NewlyDenied.Count, rep.NewlyAllowed.Count, rep.Changed.Count)
	if rep.Approximate > 0 {
		fmt.Fprintf(w, "approximate: %d records lack the principal's roles or the settings (recorded before sandgate kept them)\n", rep.Approximate)
	}
	if rep.MaskedInputs > 0 {
		fmt.Fprintf(w, "masked: %d inputs hold masked values; %d decisions depend on them (marked *)\n", rep.MaskedInputs, rep.MaskDependent)
	}
	if rep.Skipped > 0 {
		fmt.Fprintf(w, "skipped: %d records (request or decision outside the range, or unreadable)\n", rep.Skipped)
	}
	if d := rep.Drift; d != nil {
		fmt.Fprintf(w, "drift: the policy in force decides %d records otherwise (%d of them its own revision's)\n", d.Count, d.SameRevision)
		for _, ex := range d.Examples {
			fmt.Fprintf(w, "  %s %s %s/%s decision %s: recorded %s, in force %s\n", ex.RecordedAt.Format(time.RFC3339), ex.Operation,
				ex.Principal, ex.Team, ex.DecisionID, verdict(ex.RecordedAllow, ex.RecordedRules), verdict(ex.CandidateAllow, ex.CandidateRules))
		}
	}
	if rep.Truncated {
		why := "at the limit"
		if rep.TimedOut {
			why = "out of time"
		}
		through := "-"
		if rep.Through != nil {
			through = rep.Through.Format(time.RFC3339Nano)
		}
		fmt.Fprintf(w, "truncated %s: decisions after %s were not replayed; continue with --since\n", why, through)
	}
	for _, part := range []struct {
		title string
		c     api.ReplayChanges
	}{{"NEWLY DENIED", rep.NewlyDenied}, {"NEWLY ALLOWED", rep.NewlyAllowed}, {"DENIED BY OTHER RULES", rep.Changed}} {
		if part.c.Count == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s (%d)\n", part.title, part.c.Count)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, g := range part.c.Rules {
			fmt.Fprintf(tw, "  %s %s: %d\n", g.Rule, g.Change, g.Count)
			for _, ex := range g.Examples {
				mark := ""
				if ex.MaskDependent {
					mark += " *"
				}
				if ex.Approximate {
					mark += " (approximate)"
				}
				id := "decision " + ex.DecisionID
				if ex.RunID != "" {
					id = "run " + ex.RunID
				}
				fmt.Fprintf(tw, "    %s\t%s\t%s/%s\t%s\t%s -> %s%s\n", ex.RecordedAt.Format(time.RFC3339), ex.Operation,
					ex.Principal, ex.Team, id, verdict(ex.RecordedAllow, ex.RecordedRules), verdict(ex.CandidateAllow, ex.CandidateRules), mark)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// verdict is a decision in a few words: allowed, or its denying rules.
func verdict(allow bool, rules []string) string {
	if allow {
		return "allowed"
	}
	return "denied by " + strings.Join(rules, ",")
}

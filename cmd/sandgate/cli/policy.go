package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/policies"
)

// Exit codes of `sandgate policy eval`.
const (
	// exitPolicyDenied: the policy denied the spec.
	exitPolicyDenied = 3
	// exitPolicyInvalid: the bundle does not compile or fails its tests,
	// or `policy test` found failing tests.
	exitPolicyInvalid = 2
)

// newPolicyCmd builds `sandgate policy`: check, test and eval a Rego
// bundle offline, without a gateway.
func newPolicyCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Check, test, list, dry-run and replay the Rego policy bundle",
		Long: `Work with a policy bundle offline. DIR defaults to --policy-dir
(SANDGATE_POLICY_DIR), and without one to the bundle embedded in this binary.
replay is the exception: the gateway replays its recorded decisions with the
candidate bundle, and audits the replay.`,
	}
	cmd.AddCommand(newPolicyCheckCmd(a), newPolicyTestCmd(a), newPolicyRulesCmd(a), newPolicyEvalCmd(a), newPolicyReplayCmd(a),
		newPolicySignCmd(a), newPolicyVerifyCmd(a))
	return cmd
}

func (a *app) policyDir(args []string) string {
	if len(args) > 0 {
		return args[0]
	}
	return a.cfg.PolicyDir
}

func newPolicyCheckCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "check [DIR]",
		Short: "Compile the bundle (tests included) and print its revision",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sum, err := policies.Check(cmd.Context(), a.policyDir(args))
			if err != nil {
				return policyInvalid(a.stderr, err)
			}
			fmt.Fprintf(a.stdout, "ok: %s compiles\nrevision %s\n", sum.Source, sum.Revision)
			for _, m := range sum.Modules {
				fmt.Fprintf(a.stdout, "  %s  %s\n", m.SHA256, m.Name)
			}
			return nil
		},
	}
}

func newPolicyTestCmd(a *app) *cobra.Command {
	var verbose bool
	cmd := &cobra.Command{
		Use:   "test [DIR]",
		Short: "Run the bundle's Rego unit tests (exit 2 when any fails)",
		Long: `Run every test_ rule of the bundle's *_test.rego files, as the engine does
before it accepts a bundle. Failures are printed with the failing expression
and its local variables; -v prints every test. Exit status 2 when any test
fails or the bundle does not compile.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rep, err := policies.RunTests(cmd.Context(), a.policyDir(args), a.stdout, verbose)
			if err != nil {
				return policyInvalid(a.stderr, err)
			}
			if !rep.OK() {
				return &ExitError{Code: exitPolicyInvalid, Message: fmt.Sprintf("%d of %d policy tests failed", rep.Failed+rep.Errored, rep.Passed+rep.Failed+rep.Errored)}
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "print every test, not only failures")
	return cmd
}

func newPolicyRulesCmd(a *app) *cobra.Command {
	var out *outputFormat
	cmd := &cobra.Command{
		Use:   "rules [DIR]",
		Short: "List the bundle's rules with their severity and controls",
		Long: `List every rule of the bundle as its METADATA annotation describes it: the
rule, its severity, the CIS and PSS controls it enforces and its title, the
most severe first (mutations last). -o json prints every field, descriptions
and locations included. Exit status 2 when the bundle is refused.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rules, err := policies.Rules(cmd.Context(), a.policyDir(args))
			if err != nil {
				return policyInvalid(a.stderr, err)
			}
			if out.JSON() {
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rules)
			}
			return writeRuleTable(a.stdout, rules)
		},
	}
	out = bindOutput(cmd)
	return cmd
}

// writeRuleTable prints rules as a table, the most severe first and the
// mutations, which have no severity, last.
func writeRuleTable(w io.Writer, rules []policies.RuleInfo) error {
	rank := func(r policies.RuleInfo) int {
		if i := slices.Index(policies.Severities, r.Severity); i >= 0 {
			return i
		}
		return len(policies.Severities)
	}
	rules = slices.Clone(rules)
	slices.SortStableFunc(rules, func(x, y policies.RuleInfo) int { return rank(x) - rank(y) })
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tSEVERITY\tCONTROLS\tTITLE")
	for _, r := range rules {
		sev, controls := r.Severity, strings.Join(r.Controls, ", ")
		if r.Kind == policies.KindMutation {
			sev = "(mutation)"
		}
		if controls == "" {
			controls = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Rule, sev, controls, r.Title)
	}
	return tw.Flush()
}

func newPolicyEvalCmd(a *app) *cobra.Command {
	var (
		input     string
		principal sandgate.Principal
		roles     []string
		review    bool
	)
	cmd := &cobra.Command{
		Use:   "eval --input SPEC.json",
		Short: "Dry-run a run spec against the bundle and print the decision",
		Long: `Decode SPEC.json as POST /v1/runs would ("-" reads stdin), normalise it with the
bundle's defaults, evaluate it and print the decision as JSON: the same answer
POST /v1/admission/review gives, without a gateway.

Exit status: 0 allowed, 3 denied, 2 the bundle is invalid, 1 the spec is
invalid or another error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if input == "" {
				return fmt.Errorf("--input is required")
			}
			var r io.Reader = a.stdin
			if input != "-" {
				data, err := os.ReadFile(input)
				if err != nil {
					return err
				}
				r = bytes.NewReader(data)
			}
			spec, err := sandgate.DecodeRunSpec(r)
			if err != nil {
				return fmt.Errorf("%s: %s", input, sandgate.ErrorMessageOf(err))
			}
			keys, err := a.cfg.verifyKeys()
			if err != nil {
				return err
			}
			e, err := policies.New(cmd.Context(), policies.Options{
				Dir:        a.cfg.PolicyDir,
				Settings:   a.cfg.policyConfig.settings(),
				VerifyKeys: keys,
			})
			if err != nil {
				return policyInvalid(a.stderr, err)
			}
			norm, err := sandgate.Normalize(spec, e.Defaults())
			if err != nil {
				return fmt.Errorf("%s: %s", input, sandgate.ErrorMessageOf(err))
			}
			for _, r := range roles {
				principal.Roles = append(principal.Roles, sandgate.Role(r))
			}
			op := sandgate.OperationRun
			if review {
				op = sandgate.OperationReview
			}
			d, err := e.Decide(cmd.Context(), sandgate.AdmissionInput{
				APIVersion: sandgate.APIVersion, Operation: op, Principal: principal, Request: norm,
			})
			if err != nil {
				return err
			}
			enc := json.NewEncoder(a.stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(d); err != nil {
				return err
			}
			if !d.Allow {
				return &ExitError{Code: exitPolicyDenied, Message: fmt.Sprintf("denied by %d violation(s)", len(d.Violations))}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&input, "input", "", `run spec JSON file ("-" for stdin)`)
	f.StringVar(&principal.Name, "principal", "cli", "principal name the policy sees")
	f.StringVar(&principal.Team, "team", "", "principal's team")
	f.StringSliceVar(&roles, "roles", []string{string(sandgate.RoleSubmitter)}, "principal's roles")
	f.BoolVar(&review, "review", false, `evaluate as operation "review" instead of "run"`)
	return cmd
}

// policyInvalid prints every problem of a refused bundle and exits 2.
func policyInvalid(w io.Writer, err error) error {
	errs, ok := policies.IsPolicyInvalid(err)
	if !ok {
		return err
	}
	for _, e := range errs {
		fmt.Fprintln(w, e)
	}
	return &ExitError{Code: exitPolicyInvalid, Message: fmt.Sprintf("policy bundle refused: %d problem(s)", len(errs))}
}

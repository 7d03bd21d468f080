package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/client"
)

// newApprovalsCmd builds `sandgate approvals list|approve|deny`.
func newApprovalsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "approvals",
		Short: "List, approve and deny the requests the policy asked approval for",
		Long: `List, approve and deny the runs and sessions the policy answered require_approval
(SANDGATE_URL, token from SANDGATE_TOKEN). The policy says who may see and decide
each one (by default the approver role, never the requester). An approved request
is decided again by the policy in force, as its requester, with the approval as
input: it runs only if that policy allows it.`,
	}
	cmd.AddCommand(newApprovalsListCmd(a), newApprovalDecideCmd(a, "approve"), newApprovalDecideCmd(a, "deny"))
	return cmd
}

func newApprovalsListCmd(a *app) *cobra.Command {
	var o client.ApprovalListOptions
	var status string
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List approvals, newest first",
		Example: "  sandgate approvals list --status pending",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Status = sandgate.ApprovalStatus(status)
			c, err := a.newClient()
			if err != nil {
				return err
			}
			list, err := c.Approvals(cmd.Context(), o)
			if err != nil {
				return clientError(a, err)
			}
			if asJSON {
				return writeJSON(a, list)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATUS\tOPERATION\tREQUESTER\tTEAM\tEXPIRES\tREASONS")
			for _, ap := range list.Approvals {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", ap.ID, ap.Status, ap.Operation, ap.Requester, ap.Team,
					ap.ExpiresAt.UTC().Format(time.RFC3339), reasonList(ap.Reasons))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if list.NextCursor != nil {
				_, err = fmt.Fprintf(a.stderr, "more: --cursor %s\n", *list.NextCursor)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&status, "status", "", "only approvals with this status: pending, granted, denied or expired")
	f.IntVar(&o.Limit, "limit", 0, "at most this many (the gateway's default when 0)")
	f.StringVar(&o.Cursor, "cursor", "", "the next page, as a previous list printed it")
	f.BoolVar(&asJSON, "json", false, "print the list as JSON")
	return cmd
}

// newApprovalDecideCmd builds `sandgate approvals approve|deny ID`.
func newApprovalDecideCmd(a *app, verb string) *cobra.Command {
	var comment string
	var asJSON bool
	short := "Grant an approval: its request is decided again by the policy in force"
	if verb == "deny" {
		short = "Deny an approval: its request never runs"
	}
	cmd := &cobra.Command{
		Use:     verb + " APPROVAL_ID",
		Short:   short,
		Example: fmt.Sprintf("  sandgate approvals %s 4f9c…  --comment 'ticket OPS-142'", verb),
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.newClient()
			if err != nil {
				return err
			}
			decide := c.Approve
			if verb == "deny" {
				decide = c.DenyApproval
			}
			out, err := decide(cmd.Context(), args[0], comment)
			if err != nil {
				return clientError(a, err)
			}
			if asJSON {
				return writeJSON(a, out)
			}
			_, err = fmt.Fprintln(a.stdout, approvalSummary(out))
			return err
		},
	}
	cmd.Flags().StringVar(&comment, "comment", "", "why, recorded with the decision in the audit trail")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the approval and its request as JSON")
	return cmd
}

// approvalSummary is one line: the approval's status and where its
// request now stands.
func approvalSummary(out api.ApprovalOutcome) string {
	s := fmt.Sprintf("approval %s: %s", out.Approval.ID, out.Approval.Status)
	switch {
	case out.Run != nil:
		s += fmt.Sprintf("; run %s: %s", out.Run.ID, out.Run.State)
		if out.Run.Outcome != nil {
			s += " (" + string(*out.Run.Outcome) + ")"
		}
		if out.Run.Error != nil {
			s += ": " + out.Run.Error.Message
		}
	case out.Session != nil:
		s += fmt.Sprintf("; session %s: %s", out.Session.ID, out.Session.State)
	}
	return s
}

func reasonList(vs []sandgate.Violation) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = v.Rule + ": " + v.Message
	}
	return strings.Join(parts, "; ")
}

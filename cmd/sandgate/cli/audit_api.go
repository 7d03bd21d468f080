package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// The trail's commands that read it (query, export, receipt) go through
// the gateway's API by default, with the caller's token and so the
// caller's role, as the console and curl do: an auditor needs no
// database account. --database-url reads the database directly instead,
// for operators on the database's host (a role with SELECT is enough).

// direct reports whether an audit command reads the database itself:
// only when --database-url is given on its command line.
func direct(cmd *cobra.Command) bool {
	f := cmd.Flags().Lookup("database-url")
	return f != nil && f.Changed
}

// auditPage is one page of events, as GET /v1/audit/events answers it.
type auditPage = api.AuditEventList

// queryThroughAPI is `audit query` through the gateway.
func queryThroughAPI(ctx context.Context, a *app, f sandgate.AuditFilter) (auditPage, error) {
	c, err := a.newClient()
	if err != nil {
		return auditPage{}, &ExitError{Code: exitUsage, Message: err.Error()}
	}
	page, err := c.AuditEvents(ctx, f)
	if err != nil {
		return page, clientError(a, err)
	}
	return page, nil
}

// exportThroughAPI is `audit export` through the gateway.
func exportThroughAPI(ctx context.Context, a *app, f sandgate.AuditFilter, format sandgate.ExportFormat, w io.Writer) error {
	c, err := a.newClient()
	if err != nil {
		return &ExitError{Code: exitUsage, Message: err.Error()}
	}
	if err := c.AuditExport(ctx, f, format, w); err != nil {
		return clientError(a, err)
	}
	return nil
}

// receiptThroughAPI is `audit receipt` through the gateway.
func receiptThroughAPI(ctx context.Context, a *app, runID string) (sandgate.Receipt, error) {
	c, err := a.newClient()
	if err != nil {
		return sandgate.Receipt{}, &ExitError{Code: exitUsage, Message: err.Error()}
	}
	rec, err := c.Receipt(ctx, runID)
	if err != nil {
		return rec, clientError(a, err)
	}
	return rec, nil
}

// writeEventTable prints a page of events for people: one line each,
// with what happened in words, and the command that gives the next page.
func writeEventTable(a *app, page auditPage) error {
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tTYPE\tOUTCOME\tACTOR\tTEAM\tRUN\tWHAT")
	for _, e := range page.Events {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Time.UTC().Format("2006-01-02 15:04:05.000Z"), e.Type,
			dash(e.Outcome), dash(e.Actor), dash(e.Team), dash(e.RunID), eventSummary(e))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if page.NextCursor != nil {
		fmt.Fprintf(a.stderr, "more events: add --cursor %s\n", *page.NextCursor)
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// eventSummary says in a few words what an event records: the rules of a
// denial, the exit code of an end, the image of a resolution.
func eventSummary(e sandgate.AuditRecord) string {
	var parts []string
	if rules := violatedRules(e.Payload); len(rules) > 0 {
		parts = append(parts, "rules "+strings.Join(rules, ", "))
	}
	if e.ExitCode != nil {
		parts = append(parts, fmt.Sprintf("exit %d", *e.ExitCode))
	}
	for _, k := range []string{"image", "reason", "error_code", "path"} {
		if v, ok := e.Payload[k].(string); ok && v != "" {
			parts = append(parts, k+" "+shorten(v, 60))
		}
	}
	return shorten(strings.Join(parts, "; "), 120)
}

// violatedRules lists the rules of the violations in a decision's payload.
func violatedRules(p map[string]any) []string {
	vs, _ := p["violations"].([]any)
	var out []string
	for _, v := range vs {
		if m, ok := v.(map[string]any); ok {
			if r, ok := m["rule"].(string); ok {
				out = append(out, r)
			}
		}
	}
	return out
}

// openOutput opens the file an export or receipt is written to (mode
// 0600), or stdout for "" and "-".
func openOutput(a *app, path string) (io.Writer, func() error, error) {
	if path == "" || path == "-" {
		return a.stdout, func() error { return nil }, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, nil, err
	}
	return f, func() error {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}, nil
}

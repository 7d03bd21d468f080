package cli

import (
	"fmt"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// truncationWarning says that a stream was cut at the run's output limit,
// what the limit was, and how to raise it.
func truncationWarning(stream string, produced, limit int64) string {
	at := "its output limit"
	if limit > 0 {
		at = fmt.Sprintf("the run's output limit of %d bytes (%s)", limit, humanBytes(limit))
	}
	return fmt.Sprintf("sandgate: %s was truncated at %s; the run produced %d bytes. "+
		"Raise the limit with --output-limit BYTES (output_limit_bytes in the spec), up to the policy's maximum "+
		"(maxima.output_limit_bytes of GET /v1/config), or write large output to a file and collect it with --artifact",
		stream, at, produced)
}

// humanBytes writes n in the largest binary unit that keeps it at least 1.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/unit, 0
	for v >= unit && i < 3 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.4g %s", v, []string{"KiB", "MiB", "GiB", "TiB"}[i])
}

func exitFromRun(r api.RunView) api.ExitData {
	x := api.ExitData{
		State: r.State, ExitCode: r.ExitCode, OOMKilled: r.OOMKilled, Error: r.Error, DurationMS: r.DurationMS,
		Stdout: api.StreamTotals{Bytes: r.Stdout.Bytes, Truncated: r.Stdout.Truncated},
		Stderr: api.StreamTotals{Bytes: r.Stderr.Bytes, Truncated: r.Stderr.Truncated},
	}
	if r.Outcome != nil {
		x.Outcome = *r.Outcome
	}
	return x
}

// exitFor turns a run's end into the process's exit: nil for success, the
// container's code for a failure, the codes above for the rest. limit is
// the run's output limit in bytes (0 when unknown), named by the warning
// of a truncated stream.
func exitFor(a *app, runID string, limit int64, x api.ExitData) error {
	for _, s := range []struct {
		name string
		t    api.StreamTotals
	}{{"stdout", x.Stdout}, {"stderr", x.Stderr}} {
		if s.t.Truncated {
			fmt.Fprintln(a.stderr, truncationWarning(s.name, s.t.Bytes, limit))
		}
	}
	switch x.Outcome {
	case sandgate.OutcomeSucceeded:
		return nil
	case sandgate.OutcomeFailed:
		if x.ExitCode != nil {
			return &ExitError{Code: *x.ExitCode}
		}
		return &ExitError{Code: 1}
	case sandgate.OutcomeOOMKilled:
		code := exitOOM
		if x.ExitCode != nil && *x.ExitCode != 0 {
			code = *x.ExitCode
		}
		return &ExitError{Code: code, Message: fmt.Sprintf("run %s was killed: it exceeded its memory limit", runID)}
	case sandgate.OutcomeTimedOut:
		return &ExitError{Code: exitTimedOut, Message: fmt.Sprintf("run %s timed out after %s", runID, time.Duration(x.DurationMS)*time.Millisecond)}
	case sandgate.OutcomeCancelled:
		return &ExitError{Code: exitCancelled, Message: fmt.Sprintf("run %s was cancelled", runID)}
	}
	msg := fmt.Sprintf("run %s ended with outcome %q", runID, x.Outcome)
	if x.Error != nil {
		msg = fmt.Sprintf("run %s failed: %s: %s", runID, x.Error.Code, x.Error.Message)
	}
	return &ExitError{Code: exitPlatform, Message: msg}
}

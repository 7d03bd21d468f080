package cli

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/client"
)

// witnessOptions are the flags of sandgate audit witness.
type witnessOptions struct {
	gateway, token, state, keyFile, gatewayKey, name string
	chains                                           []string
	interval                                         time.Duration
	once                                             bool
}

// newAuditWitnessCmd builds `sandgate audit witness`.
func newAuditWitnessCmd(a *app) *cobra.Command {
	var o witnessOptions
	cmd := &cobra.Command{
		Use:   "witness",
		Short: "Watch a gateway's checkpoints, check each only extends the last, cosign them; alarm on a rewritten history",
		Long: `Run apart from the gateway (another host, another operator). Every
--interval, fetch each chain's newest checkpoint note (GET
/v1/audit/checkpoint, as an auditor), check its signature against the pinned
gateway key (--gateway-key, PEM or hex, as sandgate audit public-key prints
it), fetch the consistency proof from the tree size last seen to the new one
and check it, store the new view (size and root per origin) in --state,
cosign the checkpoint with the witness's key (--key, Ed25519 PEM, made on
first use; C2SP tlog-cosignature/v1) and post the cosignature back (POST
/v1/audit/checkpoint/cosignature). A checkpoint that is not signed by the
pinned key, that is smaller than one seen, that has another root at a size
seen, or that the proof does not show to extend the last one seen is an
ALARM: the witness prints it, records it (ALARM-<origin>.json in --state)
and exits 2, and refuses the same checkpoint on every later start, since
its view stays as it was. --state/witness.prom holds its state as
Prometheus metrics (tree size and time seen per origin,
sandgate_witness_alarm) for node_exporter's textfile collector.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runWitness(cmd.Context(), a, o) },
	}
	fl := cmd.Flags()
	fl.StringVar(&o.gateway, "gateway", "", "gateway URL (default SANDGATE_URL)")
	fl.StringVar(&o.token, "token", "", "auditor bearer token (default SANDGATE_TOKEN)")
	fl.StringVar(&o.state, "state", "", "directory of the witness's view (required)")
	fl.StringVar(&o.keyFile, "key", "", "the witness's Ed25519 key file (PEM; created when absent; required)")
	fl.StringVar(&o.gatewayKey, "gateway-key", "", "the gateway's checkpoint public key file to pin (PEM or hex; required)")
	fl.StringVar(&o.name, "name", "sandgate-witness", "the witness's key name in its cosignatures")
	fl.StringSliceVar(&o.chains, "chain", nil, "chain to watch; repeatable (default: the gateway's own)")
	fl.DurationVar(&o.interval, "interval", 30*time.Second, "how often to poll")
	fl.BoolVar(&o.once, "once", false, "check once and exit")
	return cmd
}

// exitAlarm is the witness's exit status on an alarm.
const exitAlarm = 2

func runWitness(ctx context.Context, a *app, o witnessOptions) error {
	for _, f := range []struct{ name, v string }{{"state", o.state}, {"key", o.keyFile}, {"gateway-key", o.gatewayKey}} {
		if f.v == "" {
			return sandgate.FieldError(f.name, "--%s is required", f.name)
		}
	}
	if o.gateway == "" {
		o.gateway = a.cfg.URL
	}
	if o.token == "" {
		o.token = a.cfg.Token
	}
	if o.token == "" {
		return sandgate.FieldError("token", "--token (or SANDGATE_TOKEN) is required: an auditor's token")
	}
	raw, err := os.ReadFile(o.gatewayKey)
	if err != nil {
		return err
	}
	logKey, err := audit.ParsePublicKey(raw)
	if err != nil {
		return sandgate.FieldError("gateway-key", "%v", err)
	}
	key, err := audit.LoadSigningKey(o.keyFile, true)
	if err != nil {
		return err
	}
	signer := audit.NewCosigner(o.name, key)
	w, err := audit.NewWitness(o.state, logKey, signer)
	if err != nil {
		return err
	}
	c, err := client.New(o.gateway, o.token)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "witness %s (key %s) watching %s, pinned gateway key %s\n",
		o.name, signer.VerifierKey(), o.gateway, audit.KeyID(logKey))
	chains := o.chains
	if len(chains) == 0 {
		chains = []string{""}
	}
	for {
		for _, chain := range chains {
			if err := witnessOnce(ctx, a, c, w, signer, chain); err != nil {
				var alarm *audit.WitnessAlarm
				if errors.As(err, &alarm) {
					fmt.Fprintln(a.stderr, "sandgate witness:", alarm.Error())
					if rerr := w.RecordAlarm(alarm, ""); rerr != nil {
						fmt.Fprintln(a.stderr, "sandgate witness: record the alarm:", rerr)
					}
					reportAlarm(ctx, a, c, w, alarm)
					if merr := w.WriteMetrics(); merr != nil {
						fmt.Fprintln(a.stderr, "sandgate witness: metrics:", merr)
					}
					return &ExitError{Code: exitAlarm, Message: alarm.Error()}
				}
				if o.once {
					return err
				}
				fmt.Fprintln(a.stderr, "sandgate witness:", err)
			}
		}
		if err := w.WriteMetrics(); err != nil {
			fmt.Fprintln(a.stderr, "sandgate witness: metrics:", err)
		}
		if o.once {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(o.interval):
		}
	}
}

// reportAlarm posts the alarm, signed with the witness's key, to the
// gateway, which records it as an audit.witness_alarm event where
// operators and SIEMs see it. A gateway that rewrote its history may
// refuse it; the exit status, ALARM file and metric stand regardless.
func reportAlarm(ctx context.Context, a *app, c *client.Client, w *audit.Witness, alarm *audit.WitnessAlarm) {
	signed, err := w.AlarmNote(alarm)
	if err == nil {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		var v api.WitnessAlarmView
		if v, err = c.WitnessAlarm(pctx, api.WitnessAlarmRequest{Alarm: signed, WitnessKey: w.VerifierKey()}); err == nil {
			fmt.Fprintf(a.stderr, "sandgate witness: alarm recorded by the gateway as audit event %s\n", v.EventID)
			return
		}
	}
	fmt.Fprintln(a.stderr, "sandgate witness: could not report the alarm to the gateway:", err)
}

// witnessOnce checks and cosigns one chain's newest checkpoint.
func witnessOnce(ctx context.Context, a *app, c *client.Client, w *audit.Witness, signer *audit.Cosigner, chain string) error {
	cp, err := c.Checkpoint(ctx, chain)
	if err != nil {
		return fmt.Errorf("fetch checkpoint: %w", err)
	}
	// The gateway's note without the cosignatures it serves with it.
	own := cp.Note
	if i := strings.Index(own, "\n\n"); i >= 0 {
		sigs := strings.Split(strings.TrimSuffix(own[i+2:], "\n"), "\n")
		keep := []string{}
		for _, l := range sigs {
			if strings.HasPrefix(l, "— "+cp.Origin+" ") {
				keep = append(keep, l)
			}
		}
		own = own[:i+2] + strings.Join(keep, "\n") + "\n"
	}
	prove := func(origin string, from, to int64) ([]tlog.Hash, error) {
		_, chainID, _ := strings.Cut(origin, "/")
		p, err := c.ConsistencyProof(ctx, chainID, from, to)
		if err != nil {
			return nil, err
		}
		out := make([]tlog.Hash, len(p.Hashes))
		for i, h := range p.Hashes {
			b, err := base64.StdEncoding.DecodeString(h)
			if err != nil || len(b) != tlog.HashSize {
				return nil, fmt.Errorf("proof hash %d malformed", i)
			}
			out[i] = tlog.Hash(b)
		}
		return out, nil
	}
	cosigned, err := w.Observe(own, prove)
	if err != nil {
		return err
	}
	if _, err := c.Cosign(ctx, api.CosignatureRequest{Note: cosigned, WitnessKey: signer.VerifierKey()}); err != nil {
		return fmt.Errorf("post cosignature: %w", err)
	}
	fmt.Fprintf(a.stderr, "witness: %s size %d root %s consistent; cosigned\n", cp.Origin, cp.TreeSize, cp.RootHash)
	return nil
}

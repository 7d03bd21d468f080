package cli

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/client"
)

// witnessOptions are the flags of sandgate audit witness.
type witnessOptions struct {
	gateway, token, state, keyFile, name string
	gatewayKeys, rootKeys, chains        []string
	interval                             time.Duration
	once                                 bool
}

// newAuditWitnessCmd builds `sandgate audit witness`.
func newAuditWitnessCmd(a *app) *cobra.Command {
	var o witnessOptions
	cmd := &cobra.Command{
		Use:   "witness",
		Short: "Watch a gateway's checkpoints, check each only extends the last, cosign them; alarm on a rewritten history",
		Long: `Run apart from the gateway (another host, another operator). Every
--interval, fetch each chain's newest checkpoint note (GET
/v1/audit/checkpoint, as an auditor), check that it is the chain's (its
origin names the chain, and is the origin the chain's notes were under when
the witness first saw it), signed by a pinned gateway key (--gateway-key,
PEM or hex, as sandgate audit public-key prints it, or a file of several:
a cluster's nodes; the same key as when first seen), fetch the consistency
proof from the tree size last seen to the new one and check it, store the
new view (per chain: origin, key, size and root) in --state, cosign the
checkpoint with the witness's key (--key, Ed25519 PEM, made on first use;
C2SP tlog-cosignature/v1) and post the cosignature back (POST
/v1/audit/checkpoint/cosignature). A checkpoint under another origin or
key, not signed by a pinned key, smaller than one seen, with another root
at a size seen, or that the proof does not show to extend the last one seen
is an ALARM: the witness prints it, records it (ALARM-<chain>.json in
--state), reports it to the gateway signed with its key, and exits 2, and
refuses the same checkpoint on every later start, since its view stays as
it was. --state/witness.prom holds its state as Prometheus metrics (tree
size and time seen per origin, sandgate_witness_alarm) for node_exporter's
textfile collector. The gateway's operator pins this witness's verifier
key (printed at start) in SANDGATE_AUDIT_WITNESS_KEYS_FILE, or its
cosignatures and alarms are refused or not taken as a known witness's.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runWitness(cmd.Context(), a, o) },
	}
	fl := cmd.Flags()
	fl.StringVar(&o.gateway, "gateway", "", "gateway URL (default SANDGATE_URL)")
	fl.StringVar(&o.token, "token", "", "auditor bearer token (default SANDGATE_TOKEN)")
	fl.StringVar(&o.state, "state", "", "directory of the witness's view (required)")
	fl.StringVar(&o.keyFile, "key", "", "the witness's Ed25519 key file (PEM; created when absent; required)")
	fl.StringSliceVar(&o.gatewayKeys, "gateway-key", nil, "a file of the gateway checkpoint public keys to pin (PEM blocks or hex lines); repeatable")
	fl.StringSliceVar(&o.rootKeys, "root-key", nil, "a cluster root public key file: trust the node keys it endorsed, as the gateway serves the endorsements (--gateway-key or --root-key required); repeatable")
	fl.StringVar(&o.name, "name", "sandgate-witness", "the witness's key name in its cosignatures")
	fl.StringSliceVar(&o.chains, "chain", nil, "chain to watch; repeatable (default: the gateway's own)")
	fl.DurationVar(&o.interval, "interval", 30*time.Second, "how often to poll")
	fl.BoolVar(&o.once, "once", false, "check once and exit")
	return cmd
}

// exitAlarm is the witness's exit status on an alarm.
const exitAlarm = 2

func runWitness(ctx context.Context, a *app, o witnessOptions) error {
	for _, f := range []struct{ name, v string }{{"state", o.state}, {"key", o.keyFile}, {"gateway-key", strings.Join(append(o.gatewayKeys, o.rootKeys...), ",")}} {
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
	var anchors proof.Anchors
	for _, f := range o.gatewayKeys {
		ks, err := readPublicKeys(f)
		if err != nil {
			return sandgate.FieldError("gateway-key", "%s: %v", f, err)
		}
		anchors.Pinned = append(anchors.Pinned, ks...)
	}
	for _, f := range o.rootKeys {
		ks, err := readPublicKeys(f)
		if err != nil {
			return sandgate.FieldError("root-key", "%s: %v", f, err)
		}
		anchors.Roots = append(anchors.Roots, ks...)
	}
	key, err := proof.LoadSigningKey(o.keyFile, true)
	if err != nil {
		return err
	}
	signer := proof.NewCosigner(o.name, key)
	w, err := proof.NewWitness(o.state, anchors, signer)
	if err != nil {
		return err
	}
	c, err := client.New(o.gateway, o.token)
	if err != nil {
		return err
	}
	var ids []string
	for _, k := range anchors.Pinned {
		ids = append(ids, "gateway "+proof.KeyID(k))
	}
	for _, k := range anchors.Roots {
		ids = append(ids, "root "+proof.KeyID(k))
	}
	fmt.Fprintf(a.stderr, "witness %s (key %s) watching %s, trusting %s\n",
		o.name, signer.VerifierKey(), o.gateway, strings.Join(ids, ", "))
	chains := o.chains
	if len(chains) == 0 {
		chains = []string{""}
	}
	for {
		for _, chain := range chains {
			if err := witnessOnce(ctx, a, c, w, signer, chain); err != nil {
				var alarm *proof.WitnessAlarm
				if errors.As(err, &alarm) {
					fmt.Fprintln(a.stderr, "sandgate witness:", alarm.Error())
					if rerr := w.State().RecordAlarm(alarm, "", time.Now()); rerr != nil {
						fmt.Fprintln(a.stderr, "sandgate witness: record the alarm:", rerr)
					}
					reportAlarm(ctx, a, c, w, alarm)
					if merr := w.State().WriteMetrics(); merr != nil {
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
		if err := w.State().WriteMetrics(); err != nil {
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
func reportAlarm(ctx context.Context, a *app, c *client.Client, w *proof.Witness, alarm *proof.WitnessAlarm) {
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

// witnessOnce checks and cosigns one chain's newest checkpoint ("" the
// gateway's own chain, as its answer names it).
func witnessOnce(ctx context.Context, a *app, c *client.Client, w *proof.Witness, signer *proof.Cosigner, chain string) error {
	cp, err := c.Checkpoint(ctx, chain)
	if err != nil {
		return fmt.Errorf("fetch checkpoint: %w", err)
	}
	if chain == "" {
		chain = cp.ChainID
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
	prove := func(chainID string, from, to int64) ([]tlog.Hash, error) {
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
	var ends []proof.Endorsement
	for _, e := range cp.Endorsements {
		ends = append(ends, proof.Endorsement(e))
	}
	cosigned, err := w.Observe(chain, own, ends, prove)
	if err != nil {
		return err
	}
	if _, err := c.Cosign(ctx, api.CosignatureRequest{Note: cosigned, WitnessKey: signer.VerifierKey()}); err != nil {
		return fmt.Errorf("post cosignature: %w", err)
	}
	fmt.Fprintf(a.stderr, "witness: %s size %d root %s consistent; cosigned\n", cp.Origin, cp.TreeSize, cp.RootHash)
	return nil
}

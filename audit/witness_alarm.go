package audit

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
)

// Witnesses' alarms, as the gateway takes them: checked against the key
// posted with them (proof.ParseAlarm), known only when the operator
// pinned that key (Config.Witnesses), recorded as audit.witness_alarm,
// and bounded: an alarm that repeats one of the same witness within a day
// is counted, not recorded again, and past alarmsPerHour recorded alarms
// in an hour by the same principal, or of the same witness key, more are
// refused (RATE-LIMITED). An auditor's token can make up a witness key,
// so alarms are evidence only of what a pinned witness signed.

// Alarm bounds.
const (
	alarmsPerHour = 10
	alarmRepeats  = 24 * time.Hour
)

// RecordWitnessAlarm checks a witness's signed alarm and records it as
// audit.witness_alarm by r's principal, unless it repeats one the same
// witness posted within a day: then it answers that one (Repeat set).
// INVALID-REQUEST when the alarm is malformed or not signed by the key
// posted with it, RATE-LIMITED past the bounds, AUDIT-UNAVAILABLE when
// the trail cannot record it now.
func (s *Proofs) RecordWitnessAlarm(ctx context.Context, r sandgate.WitnessAlarmReport) (sandgate.WitnessAlarm, error) {
	a, err := proof.ParseAlarm(r)
	if err != nil {
		return a, err
	}
	a.KnownWitness = s.witnesses[r.WitnessKey]
	// One alarm at a time, so that a burst is counted against the bounds
	// as it is recorded (per gateway: each node of a cluster bounds its
	// own).
	s.alarmMu.Lock()
	defer s.alarmMu.Unlock()
	if a.EventID, err = s.repeatedAlarm(ctx, a); err != nil || a.EventID != "" {
		a.Repeat = a.EventID != ""
		return a, err
	}
	var byPrincipal, byWitness int
	err = s.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE actor = $2), count(*) FILTER (WHERE payload->>'witness_key' = $3)
		FROM audit_events WHERE type = $1 AND recorded_at > now() - interval '1 hour'`,
		string(sandgate.EventAuditWitnessAlarm), r.Actor, r.WitnessKey).Scan(&byPrincipal, &byWitness)
	if err != nil {
		return a, dbErr(err, "count witness alarms")
	}
	if byPrincipal >= alarmsPerHour || byWitness >= alarmsPerHour {
		return a, &sandgate.Error{Code: sandgate.CodeRateLimited,
			Message: "too many witness alarms in the last hour from this principal or of this witness key; the alarms recorded stand",
			Details: map[string]any{"limit_per_hour": alarmsPerHour, "principal_alarms": byPrincipal, "witness_alarms": byWitness}}
	}
	subject := sandgate.Subject{CorrelationID: r.CorrelationID, Actor: r.Actor, Team: r.Team, Node: s.cfg.Node}
	ev := sandgate.NewAuditWitnessAlarm(subject, s.cfg.Clock(), a.Kind, map[string]any{
		"witness": a.Witness, "witness_key": a.WitnessKey, "known_witness": a.KnownWitness,
		"origin": a.Origin, "chain_id": a.ChainID, "kind": a.Kind, "detail": a.Detail,
		"seen_size": a.SeenSize, "seen_root": a.SeenRoot, "offered_size": a.OfferedSize, "offered_root": a.OfferedRoot,
		"raised_at": a.RaisedAt.UTC().Format(time.RFC3339), "alarm": r.Note,
	})
	ev.ID = s.cfg.IDs()
	if err := s.writer.Record(ctx, ev); err != nil {
		return a, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "the audit trail cannot record the alarm now; retry")
	}
	a.EventID = ev.ID
	return a, nil
}

// repeatedAlarm returns the ID of an alarm a repeats (the same witness
// key, chain, kind and trees) recorded within alarmRepeats, "" when none.
func (s *Proofs) repeatedAlarm(ctx context.Context, a sandgate.WitnessAlarm) (string, error) {
	var id string
	err := s.pool.QueryRow(ctx, `SELECT event_id::text FROM audit_events
		WHERE type = $1 AND recorded_at > now() - make_interval(secs => $2)
		AND payload->>'witness_key' = $3 AND payload->>'origin' = $4 AND payload->>'kind' = $5
		AND payload->>'seen_size' = $6 AND payload->>'seen_root' = $7
		AND payload->>'offered_size' = $8 AND payload->>'offered_root' = $9
		ORDER BY recorded_at LIMIT 1`,
		string(sandgate.EventAuditWitnessAlarm), alarmRepeats.Seconds(), a.WitnessKey, a.Origin, a.Kind,
		strconv.FormatInt(a.SeenSize, 10), a.SeenRoot, strconv.FormatInt(a.OfferedSize, 10), a.OfferedRoot).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", dbErr(err, "find a repeated witness alarm")
	}
	return id, nil
}

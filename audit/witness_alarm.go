package audit

import (
	"context"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
)

// CheckWitnessAlarm checks an alarm note against the witness key posted
// with it and returns what it says, and whether that key has cosigned a
// checkpoint of this trail before.
func (s *Store) CheckWitnessAlarm(ctx context.Context, r sandgate.WitnessAlarmReport) (sandgate.WitnessAlarm, error) {
	a, err := proof.ParseAlarm(r)
	if err != nil {
		return a, err
	}
	err = s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM audit_cosignatures WHERE witness_key = $1)`, r.WitnessKey).Scan(&a.KnownWitness)
	if err != nil {
		return a, dbErr(err, "read cosignatures")
	}
	return a, nil
}

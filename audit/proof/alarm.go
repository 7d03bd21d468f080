package proof

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/sandgate/sandgate"
)

// A witness's alarm travels to the gateway as a note signed with the
// witness's own key (the cosignature/v1 key it cosigns with), so the trail
// records who raised it and that it was not made up by whoever holds an
// auditor's token. The note's text:
//
//	sandgate-witness-alarm/v1
//	<origin>
//	<kind>
//	<seen size> <seen root, base64, "-" when none>
//	<offered size> <offered root, base64>
//	<raised at, RFC 3339>
//	<detail, one line>
//
// Its first line is no tree size, so it can never pass for a checkpoint.

// alarmHeader is the first line of an alarm note.
const alarmHeader = "sandgate-witness-alarm/v1"

// maxAlarmDetail bounds the detail an alarm carries.
const maxAlarmDetail = 2000

// AlarmNote returns a as a note signed by the witness's cosigner.
func (w *Witness) AlarmNote(a *WitnessAlarm) (string, error) {
	seenRoot := a.SeenRoot
	if a.SeenSize == 0 || seenRoot == "" {
		seenRoot = "-"
	}
	offeredRoot := a.OfferedRoot
	if offeredRoot == "" {
		offeredRoot = "-"
	}
	detail := strings.Join(strings.Fields(a.Detail), " ")
	if len(detail) > maxAlarmDetail {
		detail = detail[:maxAlarmDetail]
	}
	text := fmt.Sprintf("%s\n%s\n%s\n%d %s\n%d %s\n%s\n%s\n", alarmHeader, oneLine(a.Origin), oneLine(a.Kind),
		a.SeenSize, seenRoot, a.OfferedSize, offeredRoot, w.nowFunc().UTC().Format(time.RFC3339), detail)
	signed, err := note.Sign(&note.Note{Text: text}, w.signer)
	if err != nil {
		return "", fmt.Errorf("sign the alarm: %w", err)
	}
	return string(signed), nil
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), "_")
	if s == "" {
		return "-"
	}
	return s
}

// VerifierKey is the witness's verifier key, posted with its alarms.
func (w *Witness) VerifierKey() string { return w.signer.VerifierKey() }

// maxAlarmNote bounds an alarm note taken from a witness.
const maxAlarmNote = 8 << 10

// ParseAlarm checks an alarm note against the witness key posted with it
// and returns what it says; INVALID-REQUEST, naming the field, when it is
// malformed or not signed by that key.
func ParseAlarm(r sandgate.WitnessAlarmReport) (sandgate.WitnessAlarm, error) {
	var a sandgate.WitnessAlarm
	if len(r.Note) > maxAlarmNote {
		return a, sandgate.FieldError("alarm", "the alarm is longer than %d bytes", maxAlarmNote)
	}
	v, err := NewCosignatureVerifier(r.WitnessKey)
	if err != nil {
		return a, sandgate.FieldError("witness_key", "%v", err)
	}
	n, err := note.Open([]byte(r.Note), note.VerifierList(v))
	if err != nil {
		return a, sandgate.FieldError("alarm", "the alarm is not signed by %s: %v", v.Name(), err)
	}
	lines := strings.Split(strings.TrimSuffix(n.Text, "\n"), "\n")
	if len(lines) != 7 || lines[0] != alarmHeader {
		return a, sandgate.FieldError("alarm", "not a %s note", alarmHeader)
	}
	a.Witness, a.WitnessKey, a.Origin, a.Kind, a.Detail = v.Name(), r.WitnessKey, lines[1], lines[2], lines[6]
	if !slices.Contains(alarmKinds, a.Kind) {
		return a, sandgate.FieldError("alarm", "unknown alarm kind %q", a.Kind)
	}
	var ok1, ok2 bool
	a.SeenSize, a.SeenRoot, ok1 = sizeRoot(lines[3])
	a.OfferedSize, a.OfferedRoot, ok2 = sizeRoot(lines[4])
	if !ok1 || !ok2 {
		return a, sandgate.FieldError("alarm", "the alarm's tree sizes and roots are malformed")
	}
	if a.RaisedAt, err = time.Parse(time.RFC3339, lines[5]); err != nil {
		return a, sandgate.FieldError("alarm", "the alarm's time is not RFC 3339")
	}
	_, a.ChainID, _ = strings.Cut(a.Origin, "/")
	return a, nil
}

// sizeRoot parses "<size> <root>" of an alarm note ("-": no root).
func sizeRoot(line string) (int64, string, bool) {
	sz, root, ok := strings.Cut(line, " ")
	n, err := strconv.ParseInt(sz, 10, 64)
	if !ok || err != nil || n < 0 || len(root) > 64 {
		return 0, "", false
	}
	if root == "-" {
		root = ""
	}
	return n, root, true
}

package gateway

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/admission"
	"github.com/sandgate/sandgate/gateway/api"
)

// The transparency-log routes: a chain's newest checkpoint note, an
// event's inclusion proof, a consistency proof between two tree sizes,
// and witnesses' cosignatures (docs/audit.md, "Proofs" and "Witness").

// proofs returns the trail's proofs, or NOT-FOUND when this gateway was
// wired without them.
func (s proofRoutes) proofs() (sandgate.AuditProofs, error) {
	if s.d.Proofs == nil {
		return nil, sandgate.Errorf(sandgate.CodeNotFound, "this gateway serves no audit proofs")
	}
	return s.d.Proofs, nil
}

// queryInt reads a non-negative integer query parameter (0 when absent).
func queryInt(c echo.Context, name string) (int64, error) {
	v := c.QueryParam(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, sandgate.FieldError(name, "must be a non-negative integer; got %q", v)
	}
	return n, nil
}

// wantsJSON reports whether the request's Accept header asks for JSON
// before plain text.
func wantsJSON(c echo.Context) bool {
	for _, part := range strings.Split(c.Request().Header.Get("Accept"), ",") {
		mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		switch mt {
		case "application/json":
			return true
		case "text/plain":
			return false
		}
	}
	return false
}

// auditCheckpoint is GET /v1/audit/checkpoint.
func (s proofRoutes) auditCheckpoint(c echo.Context) error {
	if err := checkQuery(c, "chain"); err != nil {
		return err
	}
	p, err := s.proofs()
	if err != nil {
		return err
	}
	cp, err := p.Checkpoint(c.Request().Context(), c.QueryParam("chain"))
	if err != nil {
		return unavailable(err, "the audit trail")
	}
	view := api.NewCheckpointView(cp)
	c.Response().Header().Set("Cache-Control", "no-store")
	if wantsJSON(c) {
		return c.JSON(http.StatusOK, view)
	}
	return c.Blob(http.StatusOK, "text/plain; charset=utf-8", []byte(view.Note))
}

// auditInclusion is GET /v1/audit/proof/inclusion.
func (s proofRoutes) auditInclusion(c echo.Context) error {
	if err := checkQuery(c, "event_id", "tree_size"); err != nil {
		return err
	}
	id := c.QueryParam("event_id")
	if id == "" {
		return sandgate.FieldError("event_id", "event_id is required")
	}
	size, err := queryInt(c, "tree_size")
	if err != nil {
		return err
	}
	p, err := s.proofs()
	if err != nil {
		return err
	}
	proof, err := p.InclusionProof(c.Request().Context(), id, size)
	if err != nil {
		return unavailable(err, "the audit trail")
	}
	return c.JSON(http.StatusOK, api.NewInclusionProofView(proof))
}

// auditConsistency is GET /v1/audit/proof/consistency.
func (s proofRoutes) auditConsistency(c echo.Context) error {
	if err := checkQuery(c, "chain", "from", "to"); err != nil {
		return err
	}
	from, err := queryInt(c, "from")
	if err != nil {
		return err
	}
	if c.QueryParam("from") == "" {
		return sandgate.FieldError("from", "from is required")
	}
	to, err := queryInt(c, "to")
	if err != nil {
		return err
	}
	p, err := s.proofs()
	if err != nil {
		return err
	}
	proof, err := p.ConsistencyProof(c.Request().Context(), c.QueryParam("chain"), from, to)
	if err != nil {
		return unavailable(err, "the audit trail")
	}
	return c.JSON(http.StatusOK, api.NewConsistencyProofView(proof))
}

// maxCosignatureBody caps POST /v1/audit/checkpoint/cosignature.
const maxCosignatureBody = 32 << 10

// auditCosign is POST /v1/audit/checkpoint/cosignature.
func (s proofRoutes) auditCosign(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	var req api.CosignatureRequest
	if err := readStrictJSON(c, maxCosignatureBody, &req); err != nil {
		return err
	}
	if req.Note == "" {
		return sandgate.FieldError("note", "note is required")
	}
	if req.WitnessKey == "" {
		return sandgate.FieldError("witness_key", "witness_key is required")
	}
	p, err := s.proofs()
	if err != nil {
		return err
	}
	cp, err := p.AddCosignature(c.Request().Context(), sandgate.Cosignature{Note: req.Note, WitnessKey: req.WitnessKey})
	if err != nil {
		return unavailable(err, "the audit trail")
	}
	return c.JSON(http.StatusOK, api.NewCheckpointView(cp))
}

// runReceipt is GET /v1/runs/{id}/receipt: the receipt `sandgate audit
// receipt` builds, as a file. A submitter gets their team's runs only;
// auditors and admins any run the trail holds, also one whose record
// the run store no longer keeps.
func (s proofRoutes) runReceipt(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	ctx, who, id := c.Request().Context(), principal(c), c.Param("id")
	if _, err := uuid.Parse(id); err != nil || len(id) != 36 {
		return sandgate.Errorf(sandgate.CodeNotFound, "run %s not found", id)
	}
	if _, err := s.admit(c, admission.ReadRun{Run: id}); err != nil && !(admission.SeesAllTeams(who) && sandgate.ErrorCodeOf(err) == sandgate.CodeNotFound) {
		return err
	}
	p, err := s.proofs()
	if err != nil {
		return err
	}
	rec, err := p.Receipt(ctx, id)
	if err != nil {
		return unavailable(err, "the audit trail")
	}
	c.Response().Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": "receipt-" + id + ".json"}))
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusOK, rec)
}

// maxWitnessAlarmBody caps POST /v1/audit/witness/alarm.
const maxWitnessAlarmBody = 16 << 10

// auditWitnessAlarm is POST /v1/audit/witness/alarm: a witness reports a
// checkpoint it refused. The alarm must be signed by the key posted with
// it; the trail records it as audit.witness_alarm (actor: the token's
// principal), or counts it as a repeat, within its bounds
// (AuditProofs.RecordWitnessAlarm); recorded alarms are counted in
// sandgate_audit_witness_alarms_total, repeats in
// sandgate_audit_witness_alarm_repeats_total.
func (s proofRoutes) auditWitnessAlarm(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	var req api.WitnessAlarmRequest
	if err := readStrictJSON(c, maxWitnessAlarmBody, &req); err != nil {
		return err
	}
	if req.Alarm == "" {
		return sandgate.FieldError("alarm", "alarm is required")
	}
	if req.WitnessKey == "" {
		return sandgate.FieldError("witness_key", "witness_key is required")
	}
	p, err := s.proofs()
	if err != nil {
		return err
	}
	who := principal(c)
	a, err := p.RecordWitnessAlarm(c.Request().Context(), sandgate.WitnessAlarmReport{Note: req.Alarm, WitnessKey: req.WitnessKey,
		Actor: who.Name, Team: who.Team, CorrelationID: correlationID(c)})
	if err != nil {
		return unavailable(err, "the audit trail")
	}
	if a.Repeat {
		s.metrics.witnessAlarmRepeat()
	} else {
		s.metrics.witnessAlarm(a.Kind, a.KnownWitness)
		s.log.Error("witness alarm recorded", "witness", a.Witness, "origin", a.Origin, "kind", a.Kind, "detail", a.Detail,
			"known_witness", a.KnownWitness, "event_id", a.EventID)
	}
	return c.JSON(http.StatusCreated, api.WitnessAlarmView{EventID: a.EventID, Witness: a.Witness, WitnessKey: a.WitnessKey,
		Origin: a.Origin, ChainID: a.ChainID, Kind: a.Kind, Detail: a.Detail, SeenSize: a.SeenSize, SeenRoot: a.SeenRoot,
		OfferedSize: a.OfferedSize, OfferedRoot: a.OfferedRoot, RaisedAt: a.RaisedAt.UTC(), KnownWitness: a.KnownWitness, Repeat: a.Repeat})
}

// readStrictJSON reads a JSON body of at most max bytes into into, as
// decodeStrict does.
func readStrictJSON(c echo.Context, max int64, into any) error {
	if err := requireJSON(c); err != nil {
		return err
	}
	raw, err := io.ReadAll(io.LimitReader(c.Request().Body, max+1))
	if err != nil {
		return sandgate.WrapError(sandgate.CodeInvalidRequest, err, "read body")
	}
	if int64(len(raw)) > max {
		return sandgate.Errorf(sandgate.CodeTooLarge, "the body is larger than %d bytes", max)
	}
	return decodeStrict(raw, into)
}

// decodeStrict decodes one JSON object, refusing unknown fields, naming
// the field at fault.
func decodeStrict(raw []byte, into any) error {
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			return sandgate.FieldError(ute.Field, "wrong type")
		}
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return sandgate.FieldError(strings.Trim(f, `"`), "unknown field")
		}
		return sandgate.FieldError("body", "not a JSON object: %v", err)
	}
	if dec.More() {
		return sandgate.FieldError("body", "one JSON object expected")
	}
	return nil
}

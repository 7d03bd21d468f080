package api

import "time"

// MaxReplayBodyBytes bounds the body of POST /v1/policies/replay: the
// candidate bundle's files, JSON-encoded.
const MaxReplayBodyBytes = 8 << 20

// ReplayRequest is the body of POST /v1/policies/replay: the candidate
// bundle as the files of its directory, by name ("admission.rego",
// "admission_test.rego", "data.json"), each with its text.
type ReplayRequest struct {
	Files map[string]string `json:"files"`
}

// The changes of a group of a ReplayChanges.
const (
	// ReplayRuleAdded: the candidate's decision names the rule and the
	// recorded decision did not.
	ReplayRuleAdded = "added"
	// ReplayRuleRemoved: the recorded decision named the rule and the
	// candidate's does not.
	ReplayRuleRemoved = "removed"
)

// ReplayReport is the answer of POST /v1/policies/replay: how the
// recorded admission decisions would have gone with the candidate bundle.
type ReplayReport struct {
	// CandidateRevision is the candidate's revision, as a reload of the
	// same files would report it; CurrentRevision the policy in force.
	CandidateRevision string       `json:"candidate_revision"`
	CurrentRevision   string       `json:"current_revision"`
	Filter            ReplayFilter `json:"filter"`
	// Replayed decisions were evaluated with the candidate; Unchanged of
	// them had the recorded verdict and deny rules.
	Replayed  int `json:"replayed"`
	Unchanged int `json:"unchanged"`
	// NewlyDenied were allowed and would be denied, grouped by the rules
	// that would deny them; NewlyAllowed were denied and would be allowed,
	// grouped by the rules that denied them; Changed were denied and still
	// would be, by other rules (added or removed).
	NewlyDenied  ReplayChanges `json:"newly_denied"`
	NewlyAllowed ReplayChanges `json:"newly_allowed"`
	Changed      ReplayChanges `json:"changed"`
	// Approximate counts the replayed decisions recorded before the
	// decision record's one shape (sandgate.DecisionRecord): replayed as
	// operation run (or review), with the submitter role for runs when no
	// roles were kept, no role for reviews, and the settings they kept or
	// the gateway's now. Every decision recorded since replays exactly.
	Approximate int `json:"approximate"`
	// MaskedInputs counts the replayed decisions whose recorded spec holds
	// masked values (keyed hashes: env values, stdin, file contents, the
	// bundle's mask paths); MaskDependent those of them whose candidate
	// decision depends on what the masked values are (see docs/policies.md).
	MaskedInputs  int `json:"masked_inputs"`
	MaskDependent int `json:"mask_dependent"`
	// Skipped counts the records that could not be replayed: a request
	// whose decision lies outside the range (or the reverse), or a spec
	// that cannot be read back.
	Skipped int `json:"skipped"`
	// Truncated is true when the replay stopped before the end of the
	// range: at the limit, or out of time (TimedOut). Through is when the
	// last decision replayed was recorded: continue after it with since.
	Truncated  bool       `json:"truncated"`
	TimedOut   bool       `json:"timed_out"`
	Through    *time.Time `json:"through"`
	DurationMS int64      `json:"duration_ms"`
	// Drift, when the replay was asked for it (drift=true), compares the
	// records with the policy in force; null otherwise.
	Drift *ReplayDrift `json:"drift"`
}

// ReplayDrift is how the policy in force decides the replayed inputs
// otherwise than their records (verdict or denying rules). Among the
// decisions its own revision recorded (SameRevision), drift shows what a
// replay cannot reproduce: inputs recorded approximately or masked, and
// rules that read the time or the settings.
type ReplayDrift struct {
	Count        int `json:"count"`
	SameRevision int `json:"same_revision"`
	// Examples are the first few drifted decisions; their candidate_allow
	// and candidate_rules are the policy in force's.
	Examples []ReplayExample `json:"examples"`
}

// ReplayFilter is the range of a replay, as the query parameters gave it
// (since inclusive, until exclusive, both on the time each decision was
// recorded), and the most decisions it replays.
type ReplayFilter struct {
	Since *time.Time `json:"since"`
	Until *time.Time `json:"until"`
	Team  string     `json:"team,omitempty"`
	Limit int        `json:"limit"`
}

// ReplayChanges are the decisions of one kind of change, and their rules.
type ReplayChanges struct {
	Count int `json:"count"`
	// Rules are the rules the change is made of, the most frequent
	// first. A decision counts under each of its rules.
	Rules []ReplayRuleGroup `json:"rules"`
}

// ReplayRuleGroup is one rule of a change: how many decisions it added
// to (ReplayRuleAdded) or was removed from (ReplayRuleRemoved), and the
// first few of them.
type ReplayRuleGroup struct {
	Rule     string          `json:"rule"`
	Change   string          `json:"change"`
	Count    int             `json:"count"`
	Examples []ReplayExample `json:"examples"`
}

// ReplayExample is one decision that would change.
type ReplayExample struct {
	DecisionID    string `json:"decision_id"`
	RunID         string `json:"run_id,omitempty"`
	CorrelationID string `json:"correlation_id,omitempty"`
	Principal     string `json:"principal"`
	Team          string `json:"team"`
	// Operation is "run", "review", "session" or "exec".
	Operation  string    `json:"operation"`
	RecordedAt time.Time `json:"recorded_at"`
	// RecordedRevision, RecordedAllow and RecordedRules are the recorded
	// decision; CandidateAllow and CandidateRules the candidate's. Rules
	// are the denying ones, sorted.
	RecordedRevision string   `json:"recorded_revision"`
	RecordedAllow    bool     `json:"recorded_allow"`
	RecordedRules    []string `json:"recorded_rules"`
	CandidateAllow   bool     `json:"candidate_allow"`
	CandidateRules   []string `json:"candidate_rules"`
	Approximate      bool     `json:"approximate"`
	MaskDependent    bool     `json:"mask_dependent"`
}

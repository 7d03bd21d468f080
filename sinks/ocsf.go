package sinks

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sandgate/sandgate"
)

// OCSFVersion is the OCSF schema version the events claim.
const OCSFVersion = "1.3.0"

// The OCSF classes sandgate's events map to. docs/audit.md ("Streaming to
// a SIEM") gives the table and the reasons.
const (
	classProcessActivity      = 1007 // System Activity: a run's container, from creation to removal
	classEventLogActivity     = 1008 // System Activity: the trail itself (export, archive, retention, keys)
	classAuthentication       = 3002 // Identity & Access Management: a refused bearer token
	classApplicationLifecycle = 6002 // Application Activity: the policy bundle loaded or refused
	classAPIActivity          = 6003 // Application Activity: a run asked for and the decision on it
)

var classNames = map[int]string{
	classProcessActivity:      "Process Activity",
	classEventLogActivity:     "Event Log Activity",
	classAuthentication:       "Authentication",
	classApplicationLifecycle: "Application Lifecycle",
	classAPIActivity:          "API Activity",
}

var categoryNames = map[int]string{
	1: "System Activity",
	3: "Identity & Access Management",
	6: "Application Activity",
}

// ocsfClass is where one event type lands: its class, and its activity
// (id and name) in that class.
type ocsfClass struct {
	class    int
	activity int
	name     string
}

// ocsfClasses maps every event type. A type without an entry (a new one
// this table has not caught up with) goes to API Activity, activity
// Other, with the type as its activity_name; TestOCSFCoversEveryType
// keeps the table complete.
var ocsfClasses = map[sandgate.EventType]ocsfClass{
	sandgate.EventRunRequested:      {classAPIActivity, 1, "Create"},
	sandgate.EventAdmissionAllowed:  {classAPIActivity, 1, "Create"},
	sandgate.EventAdmissionDenied:   {classAPIActivity, 1, "Create"},
	sandgate.EventAdmissionReviewed: {classAPIActivity, 2, "Read"},
	sandgate.EventCallbackDelivered: {classAPIActivity, 99, "Callback"},
	sandgate.EventCallbackFailed:    {classAPIActivity, 99, "Callback"},

	sandgate.EventAuthDenied: {classAuthentication, 1, "Logon"},

	sandgate.EventPolicyLoaded:     {classApplicationLifecycle, 8, "Update"},
	sandgate.EventPolicyLoadFailed: {classApplicationLifecycle, 8, "Update"},

	sandgate.EventImageResolved:      {classProcessActivity, 99, "Image Resolved"},
	sandgate.EventImageUnavailable:   {classProcessActivity, 99, "Image Unavailable"},
	sandgate.EventContainerCreated:   {classProcessActivity, 99, "Create"},
	sandgate.EventContainerStarted:   {classProcessActivity, 1, "Launch"},
	sandgate.EventContainerExited:    {classProcessActivity, 2, "Terminate"},
	sandgate.EventContainerOOMKilled: {classProcessActivity, 2, "Terminate"},
	sandgate.EventRunTimedOut:        {classProcessActivity, 2, "Terminate"},
	sandgate.EventRunCancelled:       {classProcessActivity, 2, "Terminate"},
	sandgate.EventRunFailed:          {classProcessActivity, 99, "Failed"},
	sandgate.EventRunLost:            {classProcessActivity, 99, "Lost"},
	sandgate.EventContainerRemoved:   {classProcessActivity, 99, "Remove"},
	sandgate.EventExecutorRetry:      {classProcessActivity, 99, "Retry"},
	sandgate.EventOrphanRemoved:      {classProcessActivity, 99, "Remove"},
	sandgate.EventVolumeRemoved:      {classProcessActivity, 99, "Volume Removed"},
	sandgate.EventArtifactsCollected: {classProcessActivity, 99, "Artifacts Collected"},

	sandgate.EventAuditExported:      {classEventLogActivity, 3, "Export"},
	sandgate.EventAuditArchived:      {classEventLogActivity, 4, "Archive"},
	sandgate.EventRetentionApplied:   {classEventLogActivity, 2, "Delete"},
	sandgate.EventAuditKeyRegistered: {classEventLogActivity, 99, "Key Registered"},
	sandgate.EventAuditKeyRotated:    {classEventLogActivity, 99, "Key Rotated"},
}

// Severity is how much an event matters, as OCSF's severity_id and as a
// syslog severity.
func Severity(t sandgate.EventType) (ocsfID int, ocsfName string, syslog int) {
	switch t {
	case sandgate.EventAdmissionDenied, sandgate.EventAuthDenied, sandgate.EventPolicyLoadFailed,
		sandgate.EventImageUnavailable, sandgate.EventCallbackFailed:
		return 3, "Medium", 4 // warning
	case sandgate.EventRunFailed, sandgate.EventRunLost, sandgate.EventContainerOOMKilled,
		sandgate.EventRunTimedOut, sandgate.EventExecutorRetry:
		return 2, "Low", 5 // notice
	default:
		return 1, "Informational", 6 // informational
	}
}

// failed reports whether the event says something did not happen as
// asked: OCSF status Failure.
func failed(r sandgate.AuditRecord) bool {
	switch r.Type {
	case sandgate.EventAdmissionDenied, sandgate.EventAuthDenied, sandgate.EventPolicyLoadFailed,
		sandgate.EventImageUnavailable, sandgate.EventCallbackFailed, sandgate.EventRunFailed,
		sandgate.EventRunLost, sandgate.EventContainerOOMKilled, sandgate.EventRunTimedOut:
		return true
	case sandgate.EventAdmissionReviewed:
		return r.Outcome == "denied"
	}
	return false
}

// EncodeOCSF returns the record as one OCSF event (JSON). sandgate's own
// fields, which no OCSF attribute holds exactly, are kept whole under
// unmapped.sandgate (all but the hashed body, which the sandgate format
// carries).
func EncodeOCSF(r sandgate.AuditRecord, productVersion string) ([]byte, error) {
	c, ok := ocsfClasses[r.Type]
	if !ok {
		c = ocsfClass{classAPIActivity, 99, string(r.Type)}
	}
	sevID, sevName, _ := Severity(r.Type)
	category := c.class / 1000
	ev := map[string]any{
		"class_uid":     c.class,
		"class_name":    classNames[c.class],
		"category_uid":  category,
		"category_name": categoryNames[category],
		"activity_id":   c.activity,
		"activity_name": c.name,
		"type_uid":      c.class*100 + c.activity,
		"type_name":     classNames[c.class] + ": " + c.name,
		"time":          r.Time.UnixMilli(),
		"severity_id":   sevID,
		"severity":      sevName,
		"message":       message(r),
		"metadata": map[string]any{
			"uid":             r.ID,
			"version":         OCSFVersion,
			"correlation_uid": r.CorrelationID,
			"logged_time":     r.RecordedAt.UnixMilli(),
			"sequence":        r.Seq,
			"log_name":        r.ChainID,
			"event_code":      string(r.Type),
			"product": map[string]any{
				"name": "sandgate", "vendor_name": "sandgate", "version": productVersion,
			},
		},
		"actor": actor(r),
		"device": map[string]any{
			"hostname": r.Node, "type_id": 1, "type": "Server",
		},
		"unmapped": map[string]any{"sandgate": unmapped(r)},
	}
	if r.CorrelationID == "" {
		delete(ev["metadata"].(map[string]any), "correlation_uid")
	}
	if failed(r) {
		ev["status_id"], ev["status"] = 2, "Failure"
	} else {
		ev["status_id"], ev["status"] = 1, "Success"
	}
	if r.Outcome != "" {
		ev["status_detail"] = r.Outcome
	}
	switch c.class {
	case classAPIActivity:
		ev["api"] = map[string]any{
			"operation": string(r.Type),
			"service":   map[string]any{"name": "sandgate"},
		}
		ev["dst_endpoint"] = map[string]any{"hostname": r.Node, "svc_name": "sandgate"}
		switch r.Type {
		case sandgate.EventAdmissionAllowed:
			ev["disposition_id"], ev["disposition"] = 1, "Allowed"
		case sandgate.EventAdmissionDenied:
			ev["disposition_id"], ev["disposition"] = 2, "Blocked"
		}
		if r.RunID != "" {
			ev["resources"] = []any{map[string]any{"uid": r.RunID, "type": "run"}}
		}
	case classAuthentication:
		ev["user"] = map[string]any{"name": orUnknown(r.Actor)}
		ev["dst_endpoint"] = map[string]any{"hostname": r.Node, "svc_name": "sandgate"}
	case classApplicationLifecycle:
		ev["app"] = map[string]any{"name": "sandgate policy bundle", "version": r.PolicyRevision}
	case classProcessActivity:
		p := map[string]any{"uid": r.RunID}
		if r.ExitCode != nil {
			ev["exit_code"] = *r.ExitCode
		}
		if r.ContainerID != "" {
			p["container"] = map[string]any{"uid": r.ContainerID}
		}
		ev["process"] = p
	case classEventLogActivity:
		ev["log_name"] = "sandgate audit trail"
	}
	return json.Marshal(ev)
}

// actor is who caused the event: the principal, with their team as a
// group, or sandgate itself when no principal did.
func actor(r sandgate.AuditRecord) map[string]any {
	if r.Actor == "" {
		return map[string]any{"app_name": "sandgate"}
	}
	u := map[string]any{"name": r.Actor, "type_id": 1, "type": "User"}
	if r.Team != "" {
		u["groups"] = []any{map[string]any{"name": r.Team}}
	}
	return map[string]any{"user": u, "app_name": "sandgate"}
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// unmapped is the record's sandgate fields, the body left out.
func unmapped(r sandgate.AuditRecord) map[string]any {
	m := map[string]any{
		"event_id": r.ID, "type": string(r.Type), "chain_id": r.ChainID, "seq": r.Seq,
		"recorded_at": r.RecordedAt, "event_time": r.Time, "hash": r.Hash, "prev_hash": r.PrevHash,
	}
	add := func(k, v string) {
		if v != "" {
			m[k] = v
		}
	}
	add("outcome", r.Outcome)
	add("correlation_id", r.CorrelationID)
	add("run_id", r.RunID)
	add("decision_id", r.DecisionID)
	add("container_id", r.ContainerID)
	add("actor", r.Actor)
	add("team", r.Team)
	add("node", r.Node)
	add("policy_revision", r.PolicyRevision)
	if r.ExitCode != nil {
		m["exit_code"] = *r.ExitCode
	}
	if len(r.Payload) > 0 {
		m["payload"] = r.Payload
	}
	return m
}

// message is a line a person reads in the SIEM's list.
func message(r sandgate.AuditRecord) string {
	var b strings.Builder
	b.WriteString(string(r.Type))
	if r.RunID != "" {
		fmt.Fprintf(&b, " run %s", r.RunID)
	}
	if r.Actor != "" {
		fmt.Fprintf(&b, " by %s", r.Actor)
		if r.Team != "" {
			fmt.Fprintf(&b, " (%s)", r.Team)
		}
	}
	if r.Outcome != "" {
		fmt.Fprintf(&b, ": %s", r.Outcome)
	}
	if r.ExitCode != nil {
		fmt.Fprintf(&b, ", exit code %d", *r.ExitCode)
	}
	return b.String()
}

// Encoder turns a record into the bytes of one event in a sink's format.
type Encoder func(sandgate.AuditRecord) ([]byte, error)

// NewEncoder returns the encoder of format (FormatOCSF or
// FormatSandgate); productVersion goes into OCSF's metadata.product.
func NewEncoder(format, productVersion string) (Encoder, error) {
	switch format {
	case FormatOCSF:
		return func(r sandgate.AuditRecord) ([]byte, error) { return EncodeOCSF(r, productVersion) }, nil
	case FormatSandgate:
		return func(r sandgate.AuditRecord) ([]byte, error) { return json.Marshal(r) }, nil
	}
	return nil, fmt.Errorf("sinks: unknown format %q", format)
}

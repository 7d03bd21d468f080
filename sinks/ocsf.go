package sinks

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/sandgate/sandgate"
)

// OCSFVersion is the OCSF schema version the events claim.
const OCSFVersion = "1.3.0"

// The OCSF classes sandgate's events map to. docs/audit.md ("Streaming to
// a SIEM") gives the table and the reasons.
const (
	classFileSystemActivity   = 1001 // System Activity: files put into or read out of a session's workspace
	classProcessActivity      = 1007 // System Activity: a run's container, from creation to removal
	classEventLogActivity     = 1008 // System Activity: the trail itself (export, archive, retention, keys)
	classAuthentication       = 3002 // Identity & Access Management: a refused bearer token
	classNetworkActivity      = 4001 // Network Activity: an egress run's connection through the proxy
	classApplicationLifecycle = 6002 // Application Activity: the policy bundle loaded or refused
	classAPIActivity          = 6003 // Application Activity: a run asked for and the decision on it
)

var classNames = map[int]string{
	classFileSystemActivity:   "File System Activity",
	classProcessActivity:      "Process Activity",
	classEventLogActivity:     "Event Log Activity",
	classAuthentication:       "Authentication",
	classNetworkActivity:      "Network Activity",
	classApplicationLifecycle: "Application Lifecycle",
	classAPIActivity:          "API Activity",
}

var categoryNames = map[int]string{
	1: "System Activity",
	3: "Identity & Access Management",
	4: "Network Activity",
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
	// A replay evaluates recorded requests with a candidate bundle: a
	// read of the trail, nothing admitted or run.
	sandgate.EventPolicyReplayed:    {classAPIActivity, 2, "Read"},
	sandgate.EventCallbackDelivered: {classAPIActivity, 99, "Callback"},
	sandgate.EventCallbackFailed:    {classAPIActivity, 99, "Callback"},
	// A request that waits for approval, and someone's decision on it:
	// calls to sandgate's API on the same request (its correlation).
	sandgate.EventApprovalRequested: {classAPIActivity, 1, "Create"},
	sandgate.EventApprovalGranted:   {classAPIActivity, 3, "Update"},
	sandgate.EventApprovalDenied:    {classAPIActivity, 3, "Update"},
	sandgate.EventApprovalExpired:   {classAPIActivity, 99, "Expire"},

	// A secret changed through the API: the call's own activity.
	sandgate.EventSecretSet:     {classAPIActivity, 1, "Create"},
	sandgate.EventSecretRotated: {classAPIActivity, 3, "Update"},
	sandgate.EventSecretDeleted: {classAPIActivity, 4, "Delete"},

	sandgate.EventAuthDenied: {classAuthentication, 1, "Logon"},

	sandgate.EventEgressAllowed: {classNetworkActivity, 1, "Open"},
	sandgate.EventEgressDenied:  {classNetworkActivity, 5, "Refuse"},
	// A connection to a session's port through the gateway, recorded at
	// its end with the bytes each way.
	sandgate.EventPortConnection: {classNetworkActivity, 2, "Close"},
	// The proxy wrote a secret into a run's requests, or refused one
	// carrying a placeholder where the secret may not go.
	sandgate.EventSecretUsed:        {classNetworkActivity, 99, "Secret Used"},
	sandgate.EventSecretMisdirected: {classNetworkActivity, 5, "Refuse"},

	sandgate.EventPolicyLoaded:     {classApplicationLifecycle, 8, "Update"},
	sandgate.EventPolicyLoadFailed: {classApplicationLifecycle, 8, "Update"},

	sandgate.EventImageResolved:      {classProcessActivity, 99, "Image Resolved"},
	sandgate.EventImageUnavailable:   {classProcessActivity, 99, "Image Unavailable"},
	sandgate.EventImagePullProgress:  {classProcessActivity, 99, "Image Pull Progress"},
	sandgate.EventRunCPUThrottled:    {classProcessActivity, 99, "CPU Throttled"},
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
	sandgate.EventSessionCreated:     {classProcessActivity, 1, "Launch"},
	sandgate.EventSessionEnded:       {classProcessActivity, 2, "Terminate"},
	// A terminal's program is a process launched in the session for a
	// person or an agent, and its end.
	sandgate.EventTerminalOpened: {classProcessActivity, 1, "Launch"},
	sandgate.EventTerminalClosed: {classProcessActivity, 2, "Terminate"},
	sandgate.EventNodeTakenOver:  {classProcessActivity, 99, "Node Taken Over"},

	sandgate.EventSessionFilePut: {classFileSystemActivity, 1, "Create"},
	sandgate.EventSessionFileGet: {classFileSystemActivity, 2, "Read"},

	sandgate.EventAuditExported:      {classEventLogActivity, 3, "Export"},
	sandgate.EventAuditArchived:      {classEventLogActivity, 4, "Archive"},
	sandgate.EventRetentionApplied:   {classEventLogActivity, 2, "Delete"},
	sandgate.EventAuditKeyRegistered: {classEventLogActivity, 99, "Key Registered"},
	sandgate.EventAuditKeyRotated:    {classEventLogActivity, 99, "Key Rotated"},
	sandgate.EventAuditKeyEndorsed:   {classEventLogActivity, 99, "Key Endorsed"},
	// A witness found the log's history rewritten or forked: about the
	// log itself, of High severity and a Failure.
	sandgate.EventAuditWitnessAlarm: {classEventLogActivity, 99, "Witness Alarm"},
	sandgate.EventAuditChainClosed:  {classEventLogActivity, 99, "Chain Closed"},
}

// Severity is how much an event matters, as OCSF's severity_id and as a
// syslog severity.
func Severity(t sandgate.EventType) (ocsfID int, ocsfName string, syslog int) {
	switch t {
	case sandgate.EventAuditWitnessAlarm:
		return 4, "High", 2 // critical
	case sandgate.EventAdmissionDenied, sandgate.EventAuthDenied, sandgate.EventPolicyLoadFailed,
		sandgate.EventImageUnavailable, sandgate.EventCallbackFailed, sandgate.EventEgressDenied,
		sandgate.EventSecretMisdirected:
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
		sandgate.EventRunLost, sandgate.EventContainerOOMKilled, sandgate.EventRunTimedOut, sandgate.EventEgressDenied,
		sandgate.EventAuditWitnessAlarm, sandgate.EventSecretMisdirected:
		return true
	case sandgate.EventAdmissionReviewed:
		return r.Outcome == "denied"
	}
	return false
}

// ocsfEvent is an OCSF event as sandgate writes it: the base attributes,
// then those of its class (empty ones left out). A struct, not a map: it
// is encoded for every event a sink sends.
type ocsfEvent struct {
	ClassUID      int            `json:"class_uid"`
	ClassName     string         `json:"class_name"`
	CategoryUID   int            `json:"category_uid"`
	CategoryName  string         `json:"category_name"`
	ActivityID    int            `json:"activity_id"`
	ActivityName  string         `json:"activity_name"`
	TypeUID       int            `json:"type_uid"`
	TypeName      string         `json:"type_name"`
	Time          int64          `json:"time"`
	SeverityID    int            `json:"severity_id"`
	Severity      string         `json:"severity"`
	StatusID      int            `json:"status_id"`
	Status        string         `json:"status"`
	StatusDetail  string         `json:"status_detail,omitempty"`
	Message       string         `json:"message"`
	Metadata      ocsfMetadata   `json:"metadata"`
	Actor         ocsfActor      `json:"actor"`
	Device        ocsfDevice     `json:"device"`
	API           *ocsfAPI       `json:"api,omitempty"`
	DstEndpoint   *ocsfEndpoint  `json:"dst_endpoint,omitempty"`
	DispositionID int            `json:"disposition_id,omitempty"`
	Disposition   string         `json:"disposition,omitempty"`
	Resources     []ocsfResource `json:"resources,omitempty"`
	User          *ocsfUser      `json:"user,omitempty"`
	App           *ocsfApp       `json:"app,omitempty"`
	Process       *ocsfProcess   `json:"process,omitempty"`
	ExitCode      *int           `json:"exit_code,omitempty"`
	LogName       string         `json:"log_name,omitempty"`
	Unmapped      ocsfUnmapped   `json:"unmapped"`
}

type ocsfMetadata struct {
	UID            string      `json:"uid"`
	Version        string      `json:"version"`
	CorrelationUID string      `json:"correlation_uid,omitempty"`
	LoggedTime     int64       `json:"logged_time"`
	Sequence       int64       `json:"sequence"`
	LogName        string      `json:"log_name"`
	EventCode      string      `json:"event_code"`
	Product        ocsfProduct `json:"product"`
}

type ocsfProduct struct {
	Name       string `json:"name"`
	VendorName string `json:"vendor_name"`
	Version    string `json:"version"`
}

type ocsfActor struct {
	User    *ocsfUser `json:"user,omitempty"`
	AppName string    `json:"app_name"`
}

type ocsfUser struct {
	Name   string      `json:"name"`
	TypeID int         `json:"type_id,omitempty"`
	Type   string      `json:"type,omitempty"`
	Groups []ocsfGroup `json:"groups,omitempty"`
}

type ocsfGroup struct {
	Name string `json:"name"`
}

type ocsfDevice struct {
	Hostname string `json:"hostname"`
	TypeID   int    `json:"type_id"`
	Type     string `json:"type"`
}

type ocsfAPI struct {
	Operation string      `json:"operation"`
	Service   ocsfService `json:"service"`
}

type ocsfService struct {
	Name string `json:"name"`
}

type ocsfEndpoint struct {
	Hostname string `json:"hostname,omitempty"`
	SvcName  string `json:"svc_name,omitempty"`
}

type ocsfResource struct {
	UID  string `json:"uid"`
	Type string `json:"type"`
}

type ocsfApp struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
}

type ocsfProcess struct {
	UID       string         `json:"uid,omitempty"`
	Container *ocsfContainer `json:"container,omitempty"`
}

type ocsfContainer struct {
	UID string `json:"uid"`
}

type ocsfUnmapped struct {
	Sandgate sandgateFields `json:"sandgate"`
}

// sandgateFields are the record's own fields, the hashed body left out.
type sandgateFields struct {
	EventID        string         `json:"event_id"`
	Type           string         `json:"type"`
	ChainID        string         `json:"chain_id"`
	Seq            int64          `json:"seq"`
	RecordedAt     time.Time      `json:"recorded_at"`
	EventTime      time.Time      `json:"event_time"`
	Outcome        string         `json:"outcome,omitempty"`
	CorrelationID  string         `json:"correlation_id,omitempty"`
	RunID          string         `json:"run_id,omitempty"`
	DecisionID     string         `json:"decision_id,omitempty"`
	ContainerID    string         `json:"container_id,omitempty"`
	Actor          string         `json:"actor,omitempty"`
	Team           string         `json:"team,omitempty"`
	Node           string         `json:"node,omitempty"`
	PolicyRevision string         `json:"policy_revision,omitempty"`
	ExitCode       *int           `json:"exit_code,omitempty"`
	Payload        map[string]any `json:"payload,omitempty"`
	Hash           string         `json:"hash"`
	PrevHash       string         `json:"prev_hash"`
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
	ev := ocsfEvent{
		ClassUID: c.class, ClassName: classNames[c.class],
		CategoryUID: category, CategoryName: categoryNames[category],
		ActivityID: c.activity, ActivityName: c.name,
		TypeUID: c.class*100 + c.activity, TypeName: classNames[c.class] + ": " + c.name,
		Time:       r.Time.UnixMilli(),
		SeverityID: sevID, Severity: sevName,
		StatusID: 1, Status: "Success", StatusDetail: r.Outcome,
		Message: message(r),
		Metadata: ocsfMetadata{
			UID: r.ID, Version: OCSFVersion, CorrelationUID: r.CorrelationID,
			LoggedTime: r.RecordedAt.UnixMilli(), Sequence: r.Seq, LogName: r.ChainID, EventCode: string(r.Type),
			Product: ocsfProduct{Name: "sandgate", VendorName: "sandgate", Version: productVersion},
		},
		Actor:  actor(r),
		Device: ocsfDevice{Hostname: r.Node, TypeID: 1, Type: "Server"},
		Unmapped: ocsfUnmapped{Sandgate: sandgateFields{
			EventID: r.ID, Type: string(r.Type), ChainID: r.ChainID, Seq: r.Seq, RecordedAt: r.RecordedAt, EventTime: r.Time,
			Outcome: r.Outcome, CorrelationID: r.CorrelationID, RunID: r.RunID, DecisionID: r.DecisionID,
			ContainerID: r.ContainerID, Actor: r.Actor, Team: r.Team, Node: r.Node, PolicyRevision: r.PolicyRevision,
			ExitCode: r.ExitCode, Payload: r.Payload, Hash: r.Hash, PrevHash: r.PrevHash,
		}},
	}
	if failed(r) {
		ev.StatusID, ev.Status = 2, "Failure"
	}
	gateway := &ocsfEndpoint{Hostname: r.Node, SvcName: "sandgate"}
	switch c.class {
	case classAPIActivity:
		ev.API = &ocsfAPI{Operation: string(r.Type), Service: ocsfService{Name: "sandgate"}}
		ev.DstEndpoint = gateway
		switch r.Type {
		case sandgate.EventAdmissionAllowed:
			ev.DispositionID, ev.Disposition = 1, "Allowed"
		case sandgate.EventAdmissionDenied:
			ev.DispositionID, ev.Disposition = 2, "Blocked"
		}
		if r.RunID != "" {
			ev.Resources = []ocsfResource{{UID: r.RunID, Type: "run"}}
		}
	case classAuthentication:
		ev.User = &ocsfUser{Name: orUnknown(r.Actor)}
		ev.DstEndpoint = gateway
	case classApplicationLifecycle:
		ev.App = &ocsfApp{Name: "sandgate policy bundle", Version: r.PolicyRevision}
	case classProcessActivity:
		ev.Process = &ocsfProcess{UID: r.RunID}
		if r.ContainerID != "" {
			ev.Process.Container = &ocsfContainer{UID: r.ContainerID}
		}
		ev.ExitCode = r.ExitCode
	case classEventLogActivity:
		ev.LogName = "sandgate audit trail"
	}
	return json.Marshal(ev)
}

// actor is who caused the event: the principal, with their team as a
// group, or sandgate itself when no principal did.
func actor(r sandgate.AuditRecord) ocsfActor {
	if r.Actor == "" {
		return ocsfActor{AppName: "sandgate"}
	}
	u := &ocsfUser{Name: r.Actor, TypeID: 1, Type: "User"}
	if r.Team != "" {
		u.Groups = []ocsfGroup{{Name: r.Team}}
	}
	return ocsfActor{User: u, AppName: "sandgate"}
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
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

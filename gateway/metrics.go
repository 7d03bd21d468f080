package gateway

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sandgate/sandgate"
)

// QueueDepther is implemented by a Recorder that buffers events; its depth
// is exported as sandgate_audit_queue_depth.
type QueueDepther interface {
	QueueDepth() int
}

// SpoolSizer is implemented by a Recorder with a local spool; its size is
// exported as sandgate_audit_spool_bytes.
type SpoolSizer interface {
	SpoolBytes() int64
}

// SpoolCounter is implemented by a Recorder with a local spool: what it
// spooled and redelivered since it started, exported as
// sandgate_audit_spooled_events_total,
// sandgate_audit_redelivered_events_total and
// sandgate_audit_redelivered_present_total.
type SpoolCounter interface {
	SpoolCounts() (spooled, redelivered, present int64)
}

// SinkReporter reports where each audit sink stands: exported as the
// sandgate_audit_sink_* metrics, and its warnings listed by /readyz.
type SinkReporter interface {
	SinkStatus() []sandgate.SinkStatus
}

// ActiveContainerCounter is implemented by an Executor that counts its
// containers; when it is not, the gateway counts container.created and
// container.removed events passing through Metrics.Sink.
type ActiveContainerCounter interface {
	ActiveContainers() int
}

// Metrics are the gateway's Prometheus collectors. Container durations and
// counts come from the lifecycle events that pass through Sink (see
// Observe), so the executor needs no metrics code of its own.
type Metrics struct {
	reg prometheus.Registerer

	httpDuration     *prometheus.HistogramVec
	decisions        *prometheus.CounterVec
	ruleHits         *prometheus.CounterVec
	runsFinished     *prometheus.CounterVec
	authDenied       *prometheus.CounterVec
	teamLimited      *prometheus.CounterVec
	containerCreate  prometheus.Histogram
	containerStart   prometheus.Histogram
	containerCleanup prometheus.Histogram
	orphansRemoved   prometheus.Counter
	callbacks        *prometheus.CounterVec
	witnessAlarms    *prometheus.CounterVec
	// witnessAlarmRepeats counts alarms that repeated one recorded.
	witnessAlarmRepeats prometheus.Counter
	// What finished runs used (sandgate.Usage), by outcome.
	runCPU        *prometheus.HistogramVec
	runMemoryPeak *prometheus.HistogramVec
	runWall       *prometheus.HistogramVec

	// requests caches httpDuration's children by requestKey, so that a
	// request neither formats its status nor hashes its labels again.
	requests sync.Map

	containers atomic.Int64
	timesMu    sync.Mutex
	times      map[string]*runTimes

	mu         sync.Mutex
	runsActive func() int
	// sessionsOpen counts the sessions open on this node.
	sessionsOpen func() int
	// uploads reports the bytes uploads hold and how many are in flight.
	uploads     func() (int64, int)
	counter     ActiveContainerCounter
	queue       QueueDepther
	spool       SpoolSizer
	spoolCounts SpoolCounter
	sinks       SinkReporter
}

// NewMetrics creates the collectors and registers them on reg. A nil reg
// means a new registry that also holds the Go runtime and process
// collectors; /metrics serves reg when it is also a Gatherer.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		r := prometheus.NewRegistry()
		r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		reg = r
	}
	durations := []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	m := &Metrics{
		reg: reg,
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sandgate_http_request_duration_seconds", Help: "HTTP request latency by route, method and status.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"method", "route", "status"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandgate_admission_decisions_total", Help: "Admission decisions by operation (run, review, session, exec) and result (allowed, denied).",
		}, []string{"operation", "result"}),
		ruleHits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandgate_admission_rule_hits_total", Help: "Policy violations by rule, action (deny, warn) and decision result.",
		}, []string{"rule", "action", "result"}),
		runsFinished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandgate_runs_finished_total", Help: "Finished runs by outcome.",
		}, []string{"outcome"}),
		authDenied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandgate_auth_denied_total", Help: "Refused requests by reason (unauthenticated, forbidden, rate_limited).",
		}, []string{"reason"}),
		teamLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandgate_team_rate_limited_total", Help: "Runs refused because their team was at its limits, by team.",
		}, []string{"team"}),
		containerCreate: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sandgate_container_create_seconds", Help: "Time to create a container.", Buckets: durations,
		}),
		containerStart: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sandgate_container_start_seconds", Help: "Time to start a container.", Buckets: durations,
		}),
		containerCleanup: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sandgate_container_cleanup_seconds", Help: "Time to remove a container.", Buckets: durations,
		}),
		orphansRemoved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sandgate_orphans_removed_total", Help: "Orphaned containers removed.",
		}),
		callbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandgate_callbacks_total", Help: "Completion callbacks by result (delivered, refused, exhausted, shutdown, overflow).",
		}, []string{"result"}),
		witnessAlarms: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandgate_audit_witness_alarms_total",
			Help: "Witness alarms recorded (audit.witness_alarm), by kind (inconsistent, fork, rollback, bad_signature, origin, key) and whether the operator pinned the witness's key.",
		}, []string{"kind", "known_witness"}),
		witnessAlarmRepeats: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sandgate_audit_witness_alarm_repeats_total",
			Help: "Witness alarms that repeated one the same witness posted within a day: counted, not recorded again.",
		}),
		// Runs last from milliseconds to the maximum timeout (hours), and
		// use from a few MB to the node's memory: wide, coarse buckets.
		runCPU: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sandgate_run_cpu_seconds", Help: "CPU time (user and system) a finished run's container used, by outcome.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600},
		}, []string{"outcome"}),
		runMemoryPeak: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sandgate_run_memory_peak_bytes", Help: "Peak memory of a finished run's container, by outcome.",
			Buckets: prometheus.ExponentialBuckets(1<<20, 4, 9), // 1 MiB to 64 GiB
		}, []string{"outcome"}),
		runWall: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sandgate_run_wall_seconds", Help: "Wall time from a finished run's command start to its end, by outcome.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 1800, 3600, 7200},
		}, []string{"outcome"}),
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	collectors := []prometheus.Collector{
		m.httpDuration, m.decisions, m.ruleHits, m.runsFinished, m.authDenied, m.teamLimited,
		m.containerCreate, m.containerStart, m.containerCleanup, m.orphansRemoved, m.callbacks, m.witnessAlarms, m.witnessAlarmRepeats,
		m.runCPU, m.runMemoryPeak, m.runWall,
		sinkCollector{m},
		gauge("sandgate_sessions_open", "Sessions open on this node.", func() float64 {
			m.mu.Lock()
			f := m.sessionsOpen
			m.mu.Unlock()
			if f == nil {
				return 0
			}
			return float64(f())
		}),
		gauge("sandgate_upload_bytes", "Bytes held by uploads on this node: in flight (as declared) and spooled for queued runs.", func() float64 {
			b, _ := m.uploadTotals()
			return float64(b)
		}),
		gauge("sandgate_uploads_in_flight", "Uploads being read on this node.", func() float64 {
			_, n := m.uploadTotals()
			return float64(n)
		}),
		gauge("sandgate_runs_active", "Runs executing on this node.", func() float64 {
			m.mu.Lock()
			f := m.runsActive
			m.mu.Unlock()
			if f == nil {
				return 0
			}
			return float64(f())
		}),
		gauge("sandgate_containers_active", "Managed containers that exist now.", func() float64 {
			m.mu.Lock()
			c := m.counter
			m.mu.Unlock()
			if c != nil {
				return float64(c.ActiveContainers())
			}
			return float64(max(0, m.containers.Load()))
		}),
		gauge("sandgate_audit_queue_depth", "Audit events waiting to be committed.", func() float64 {
			m.mu.Lock()
			q := m.queue
			m.mu.Unlock()
			if q == nil {
				return 0
			}
			return float64(q.QueueDepth())
		}),
		spoolCounter("sandgate_audit_spooled_events_total", "Audit events sealed into the local spool (Postgres away, or a commit's outcome unknown).", m, 0),
		spoolCounter("sandgate_audit_redelivered_events_total", "Spooled audit events delivered to Postgres.", m, 1),
		spoolCounter("sandgate_audit_redelivered_present_total", "Spooled audit events found in Postgres already when redelivered (a commit whose outcome was unknown had landed), not inserted again.", m, 2),
		gauge("sandgate_audit_spool_bytes", "Size of the local audit spool.", func() float64 {
			m.mu.Lock()
			s := m.spool
			m.mu.Unlock()
			if s == nil {
				return 0
			}
			return float64(s.SpoolBytes())
		}),
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				continue
			}
			return nil, err
		}
	}
	return m, nil
}

// requestKey names one series of the request duration histogram.
type requestKey struct {
	method, route string
	status        int
}

// observeRequest records one request's duration. A method outside the
// standard ones is counted as "other": the method comes from the client,
// and each new label value would be a new series kept for ever.
func (m *Metrics) observeRequest(method, route string, status int, d time.Duration) {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
	default:
		method = "other"
	}
	k := requestKey{method: method, route: route, status: status}
	o, ok := m.requests.Load(k)
	if !ok {
		o, _ = m.requests.LoadOrStore(k, m.httpDuration.WithLabelValues(method, route, strconv.Itoa(status)))
	}
	o.(prometheus.Observer).Observe(d.Seconds())
}

// attach connects the gauges that read from the gateway's parts.
func (m *Metrics) attach(d Deps, runsActive, sessionsOpen func() int, uploads func() (int64, int)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.runsActive, m.sessionsOpen, m.uploads = runsActive, sessionsOpen, uploads
	if c, ok := d.Executor.(ActiveContainerCounter); ok {
		m.counter = c
	}
	if q, ok := d.Recorder.(QueueDepther); ok {
		m.queue = q
	}
	if s, ok := d.Recorder.(SpoolSizer); ok {
		m.spool = s
	}
	if s, ok := d.Recorder.(SpoolCounter); ok {
		m.spoolCounts = s
	}
	m.sinks = d.Sinks
}

// uploadTotals are the uploads' bytes and count, 0 before attach.
func (m *Metrics) uploadTotals() (int64, int) {
	m.mu.Lock()
	f := m.uploads
	m.mu.Unlock()
	if f == nil {
		return 0, 0
	}
	return f()
}

// The audit sinks' series, one per sink, read at each scrape.
var (
	sinkLagEvents = prometheus.NewDesc("sandgate_audit_sink_lag_events",
		"Audit events past the sink's cursor: recorded, not yet delivered.", []string{"sink"}, nil)
	sinkLagSeconds = prometheus.NewDesc("sandgate_audit_sink_lag_seconds",
		"Age of the oldest audit event the sink has not delivered (0 when caught up).", []string{"sink"}, nil)
	sinkDelivering = prometheus.NewDesc("sandgate_audit_sink_delivering",
		"1 on the gateway that holds the sink's lock and delivers it, 0 on those standing by.", []string{"sink"}, nil)
	sinkDelivered = prometheus.NewDesc("sandgate_audit_sink_delivered_total",
		"Audit events this gateway delivered to the sink and the receiver acknowledged.", []string{"sink"}, nil)
	sinkFailures = prometheus.NewDesc("sandgate_audit_sink_failures_total",
		"Failed delivery attempts to the sink (each retried with backoff).", []string{"sink"}, nil)
)

// sinkCollector exports the sinks' status.
type sinkCollector struct{ m *Metrics }

// Describe sends the sinks' descriptors.
func (c sinkCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{sinkLagEvents, sinkLagSeconds, sinkDelivering, sinkDelivered, sinkFailures} {
		ch <- d
	}
}

// Collect sends each sink's series.
func (c sinkCollector) Collect(ch chan<- prometheus.Metric) {
	c.m.mu.Lock()
	r := c.m.sinks
	c.m.mu.Unlock()
	if r == nil {
		return
	}
	for _, st := range r.SinkStatus() {
		delivering := 0.0
		if st.Delivering {
			delivering = 1
		}
		ch <- prometheus.MustNewConstMetric(sinkLagEvents, prometheus.GaugeValue, float64(st.EventsBehind), st.Name)
		ch <- prometheus.MustNewConstMetric(sinkLagSeconds, prometheus.GaugeValue, st.SecondsBehind, st.Name)
		ch <- prometheus.MustNewConstMetric(sinkDelivering, prometheus.GaugeValue, delivering, st.Name)
		ch <- prometheus.MustNewConstMetric(sinkDelivered, prometheus.CounterValue, float64(st.Delivered), st.Name)
		ch <- prometheus.MustNewConstMetric(sinkFailures, prometheus.CounterValue, float64(st.Failures), st.Name)
	}
}

// Sink returns an EventSink that observes each event and passes it on to
// next. Give it to the executor as its event sink so that container
// metrics are counted.
func (m *Metrics) Sink(next sandgate.EventSink) sandgate.EventSink {
	return sandgate.EventSinkFunc(func(ev sandgate.Event) {
		m.Observe(ev)
		next.Emit(ev)
	})
}

// Observe counts one lifecycle event. A container step's duration is the
// payload's "duration_ms" when the executor sets one, else the time
// between the run's events: image.resolved → container.created (create),
// container.created → container.started (start), the container's end →
// container.removed (cleanup). Active containers are those created and not
// yet removed (or lost).
func (m *Metrics) Observe(ev sandgate.Event) {
	switch ev.Type {
	case sandgate.EventImageResolved:
		m.track(ev, func(t *runTimes) { t.resolved = ev.Time })
	case sandgate.EventContainerCreated:
		m.containers.Add(1)
		m.track(ev, func(t *runTimes) {
			observeStep(m.containerCreate, ev, t.resolved)
			t.created, t.counted = ev.Time, true
		})
	case sandgate.EventContainerStarted:
		m.track(ev, func(t *runTimes) { observeStep(m.containerStart, ev, t.created) })
	case sandgate.EventContainerExited, sandgate.EventContainerOOMKilled, sandgate.EventRunTimedOut, sandgate.EventRunCancelled:
		m.track(ev, func(t *runTimes) {
			if t.ended.IsZero() {
				t.ended = ev.Time
			}
		})
	case sandgate.EventContainerRemoved:
		m.finishRun(ev, func(t *runTimes) { observeStep(m.containerCleanup, ev, t.ended) })
	case sandgate.EventRunLost, sandgate.EventRunFailed, sandgate.EventImageUnavailable:
		m.finishRun(ev, nil)
	case sandgate.EventOrphanRemoved:
		m.orphansRemoved.Inc()
	}
}

// witnessAlarm counts one recorded witness alarm.
func (m *Metrics) witnessAlarm(kind string, known bool) {
	m.witnessAlarms.WithLabelValues(kind, strconv.FormatBool(known)).Inc()
}

// witnessAlarmRepeat counts a witness alarm that repeated one recorded.
func (m *Metrics) witnessAlarmRepeat() { m.witnessAlarmRepeats.Inc() }

// runTimes are the times of one run's container steps so far.
type runTimes struct {
	resolved, created, ended time.Time
	counted                  bool
}

// maxTracked bounds the runs whose step times are kept.
const maxTracked = 10000

func (m *Metrics) track(ev sandgate.Event, f func(*runTimes)) {
	m.timesMu.Lock()
	defer m.timesMu.Unlock()
	if m.times == nil {
		m.times = map[string]*runTimes{}
	}
	t := m.times[ev.RunID]
	if t == nil {
		if len(m.times) >= maxTracked {
			for k := range m.times {
				delete(m.times, k)
				break
			}
		}
		t = &runTimes{}
		m.times[ev.RunID] = t
	}
	f(t)
}

// finishRun observes the run's last step and forgets it; its container, if
// counted, is no longer active.
func (m *Metrics) finishRun(ev sandgate.Event, f func(*runTimes)) {
	m.timesMu.Lock()
	defer m.timesMu.Unlock()
	t := m.times[ev.RunID]
	if t == nil {
		// A container this process did not see created (a previous
		// process's): nothing to observe or uncount.
		return
	}
	if f != nil {
		f(t)
	}
	if t.counted {
		m.containers.Add(-1)
	}
	delete(m.times, ev.RunID)
}

// observeStep records a step's duration: the payload's duration_ms, else
// the time since the previous step.
func observeStep(h prometheus.Histogram, ev sandgate.Event, since time.Time) {
	if observeDuration(h, ev.Payload) {
		return
	}
	if !since.IsZero() && !ev.Time.IsZero() && !ev.Time.Before(since) {
		h.Observe(ev.Time.Sub(since).Seconds())
	}
}

func observeDuration(h prometheus.Histogram, payload map[string]any) bool {
	var ms float64
	switch v := payload["duration_ms"].(type) {
	case float64:
		ms = v
	case int:
		ms = float64(v)
	case int64:
		ms = float64(v)
	case json.Number:
		f, err := v.Float64()
		if err != nil {
			return false
		}
		ms = f
	case time.Duration:
		ms = float64(v) / float64(time.Millisecond)
	default:
		return false
	}
	h.Observe(ms / 1000)
	return true
}

// observeUsage records what a finished run used. A run without usage
// (its command never ran) is not observed; a counter its usage lacks is
// left out of its histogram.
func (m *Metrics) observeUsage(outcome sandgate.Outcome, u *sandgate.Usage) {
	if u == nil {
		return
	}
	o := string(outcome)
	m.runWall.WithLabelValues(o).Observe(float64(u.WallMS) / 1000)
	if u.CPUMS != nil {
		m.runCPU.WithLabelValues(o).Observe(float64(*u.CPUMS) / 1000)
	}
	if u.MemoryPeakBytes != nil {
		m.runMemoryPeak.WithLabelValues(o).Observe(float64(*u.MemoryPeakBytes))
	}
}

// Decided counts a decision of the policy in force (admission.Observer).
func (m *Metrics) Decided(op sandgate.Operation, d sandgate.Decision) {
	result := "denied"
	if d.Allow {
		result = "allowed"
	}
	m.decisions.WithLabelValues(string(op), result).Inc()
	for _, v := range d.Violations {
		m.ruleHits.WithLabelValues(v.Rule, v.Action, result).Inc()
	}
	for _, v := range d.Warnings {
		m.ruleHits.WithLabelValues(v.Rule, "warn", result).Inc()
	}
}

// TeamLimited counts a request refused for its team's limits
// (admission.Observer).
func (m *Metrics) TeamLimited(team string) { m.teamLimited.WithLabelValues(team).Inc() }

// spoolCounter exports the i-th of SpoolCounts as a counter.
func spoolCounter(name, help string, m *Metrics, i int) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 {
		m.mu.Lock()
		c := m.spoolCounts
		m.mu.Unlock()
		if c == nil {
			return 0
		}
		n := [3]int64{}
		n[0], n[1], n[2] = c.SpoolCounts()
		return float64(n[i])
	})
}

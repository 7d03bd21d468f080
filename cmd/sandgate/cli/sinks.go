package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/sinks"
)

// sinkTargets are the audit sinks SANDGATE_SINKS_FILE names, their senders
// made (and so checked) but not yet delivering.
type sinkTargets struct {
	file    sinks.File
	targets []audit.StreamSink
}

// load reads SANDGATE_SINKS_FILE and makes a sender for each sink it
// names; none without a file. Close what it made unless start takes it.
func (c *sinkConfig) load() (*sinkTargets, error) {
	st := &sinkTargets{}
	if c.SinksFile == "" {
		return st, nil
	}
	f, err := sinks.Load(c.SinksFile)
	if err != nil {
		return nil, fmt.Errorf("SANDGATE_SINKS_FILE: %w", err)
	}
	st.file = f
	for _, s := range f.Sinks {
		snd, err := sinks.New(s, sandgate.Version)
		if err != nil {
			st.close()
			return nil, fmt.Errorf("SANDGATE_SINKS_FILE: %w", err)
		}
		t := audit.StreamSink{
			Name:        s.Name,
			BatchSize:   s.BatchSize,
			StartNewest: s.Start == "newest",
			LagWarning:  time.Duration(s.LagWarning),
			Deliverer:   snd,
		}
		for _, typ := range s.Types {
			t.Types = append(t.Types, sandgate.EventType(typ))
		}
		st.targets = append(st.targets, t)
	}
	return st, nil
}

// close closes the senders (of sinks that were never started).
func (st *sinkTargets) close() {
	for _, t := range st.targets {
		_ = t.Deliverer.Close()
	}
	st.targets = nil
}

// start starts delivering the audit trail on dsn to each sink; nil
// without one. The delivery runs on connections of its own and never
// holds up an admission.
func (st *sinkTargets) start(dsn string, logger *slog.Logger) (*audit.Streamer, error) {
	if len(st.targets) == 0 {
		return nil, nil
	}
	s, err := audit.StartStreamer(audit.StreamConfig{
		DSN:          dsn,
		Sinks:        st.targets,
		PollInterval: time.Duration(st.file.PollInterval),
		Logger:       logger,
	})
	if err != nil {
		st.close()
		return nil, errors.Join(errors.New("SANDGATE_SINKS_FILE"), err)
	}
	for _, s := range st.file.Sinks {
		logger.Info("audit sink configured", "sink", s.Name, "type", s.Type, "format", s.Format)
	}
	st.targets = nil // the streamer closes them
	return s, nil
}

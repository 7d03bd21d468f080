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

// startSinks reads SANDGATE_SINKS_FILE and starts delivering the audit
// trail to each sink it names; nil without a file. The delivery runs on
// connections of its own and never holds up an admission.
func startSinks(cfg Config, logger *slog.Logger) (*audit.Streamer, error) {
	if cfg.SinksFile == "" {
		return nil, nil
	}
	f, err := sinks.Load(cfg.SinksFile)
	if err != nil {
		return nil, fmt.Errorf("SANDGATE_SINKS_FILE: %w", err)
	}
	if len(f.Sinks) == 0 {
		return nil, nil
	}
	var targets []audit.StreamSink
	closeAll := func() {
		for _, t := range targets {
			_ = t.Deliverer.Close()
		}
	}
	for _, s := range f.Sinks {
		snd, err := sinks.New(s, sandgate.Version)
		if err != nil {
			closeAll()
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
		targets = append(targets, t)
	}
	st, err := audit.StartStreamer(audit.StreamConfig{
		DSN:          cfg.DatabaseURL,
		Sinks:        targets,
		PollInterval: time.Duration(f.PollInterval),
		Logger:       logger,
	})
	if err != nil {
		closeAll()
		return nil, errors.Join(errors.New("SANDGATE_SINKS_FILE"), err)
	}
	for _, s := range f.Sinks {
		logger.Info("audit sink configured", "sink", s.Name, "type", s.Type, "format", s.Format)
	}
	return st, nil
}

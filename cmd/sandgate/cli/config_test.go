package cli

import (
	"github.com/sandgate/sandgate"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executor"
)

// TestConfigFromEnvironment: each component's values are read from the
// environment, and a value that cannot be parsed or is out of range is
// refused by its Validate, naming the variable, never replaced by the
// default; serve's validation lists every component's errors.
func TestConfigFromEnvironment(t *testing.T) {
	base := map[string]string{"SANDGATE_DEV": "1"}
	tests := []struct {
		name    string
		env     map[string]string
		wantErr string
		check   func(t *testing.T, c config)
	}{
		{name: "defaults", check: func(t *testing.T, c config) {
			if c.AuditBacklog != 64 || c.MaxConcurrent != 4 || c.AirGapped || !c.Migrate || !c.Console {
				t.Errorf("defaults: %+v", c)
			}
		}},
		{name: "values", env: map[string]string{
			"SANDGATE_AIR_GAPPED": "true", "SANDGATE_MIGRATE": "0", "SANDGATE_MAX_CONCURRENT": "16", "SANDGATE_CONSOLE": "false",
			"SANDGATE_WARM_POOL": "2", "SANDGATE_AUDIT_MAX_BACKLOG": "256", "SANDGATE_SPOOL_MAX_BYTES": "2097152",
			"SANDGATE_SINKS_FILE": "/etc/sandgate/sinks.yaml",
		}, check: func(t *testing.T, c config) {
			if !c.AirGapped || c.Migrate || c.Console || c.MaxConcurrent != 16 || c.WarmPool != 2 || c.AuditBacklog != 256 || c.SpoolMaxBytes != 2<<20 ||
				c.SinksFile != "/etc/sandgate/sinks.yaml" {
				t.Errorf("values not applied: %+v", c)
			}
		}},
		{name: "retention defaults", check: func(t *testing.T, c config) {
			if c.AuditRetention.String() != "13mo" || c.AuditRetentionInterval != time.Hour || c.AuditArchiveDir != "" {
				t.Errorf("retention defaults: %v %v %q", c.AuditRetention, c.AuditRetentionInterval, c.AuditArchiveDir)
			}
		}},
		{name: "retention values", env: map[string]string{"SANDGATE_AUDIT_RETENTION": "400d", "SANDGATE_AUDIT_RETENTION_INTERVAL": "24h",
			"SANDGATE_AUDIT_ARCHIVE_DIR": "/srv/audit-archive"}, check: func(t *testing.T, c config) {
			if c.AuditRetention.String() != "400d" || c.AuditRetentionInterval != 24*time.Hour || c.AuditArchiveDir != "/srv/audit-archive" {
				t.Errorf("retention values: %v %v %q", c.AuditRetention, c.AuditRetentionInterval, c.AuditArchiveDir)
			}
		}},
		{name: "retention forever", env: map[string]string{"SANDGATE_AUDIT_RETENTION": "forever"}, check: func(t *testing.T, c config) {
			if !c.AuditRetention.Forever() {
				t.Errorf("retention forever: %v", c.AuditRetention)
			}
		}},
		{name: "retention without a unit", env: map[string]string{"SANDGATE_AUDIT_RETENTION": "13"}, wantErr: "SANDGATE_AUDIT_RETENTION"},
		{name: "retention of no months", env: map[string]string{"SANDGATE_AUDIT_RETENTION": "0mo"}, wantErr: "SANDGATE_AUDIT_RETENTION"},
		{name: "retention interval not a duration", env: map[string]string{"SANDGATE_AUDIT_RETENTION_INTERVAL": "hourly"}, wantErr: "SANDGATE_AUDIT_RETENTION_INTERVAL"},
		{name: "retention interval too short", env: map[string]string{"SANDGATE_AUDIT_RETENTION_INTERVAL": "10ms"}, wantErr: "SANDGATE_AUDIT_RETENTION_INTERVAL must be between"},
		{name: "archive dir relative", env: map[string]string{"SANDGATE_AUDIT_ARCHIVE_DIR": "archive"}, wantErr: "SANDGATE_AUDIT_ARCHIVE_DIR"},
		{name: "cluster", env: map[string]string{
			"SANDGATE_ADVERTISE_URL": "http://10.0.0.11:8080", "SANDGATE_CLUSTER_SECRET_FILE": "/etc/sandgate/cluster.secret",
			"SANDGATE_NODE_HEARTBEAT": "500ms", "SANDGATE_NODE_LAPSE": "5s",
		}, check: func(t *testing.T, c config) {
			if c.AdvertiseURL != "http://10.0.0.11:8080" || c.ClusterSecretFile != "/etc/sandgate/cluster.secret" ||
				c.NodeHeartbeat.Milliseconds() != 500 || c.NodeLapse.Seconds() != 5 {
				t.Errorf("cluster settings not applied: %+v", c)
			}
		}},
		{name: "lapse shorter than two heartbeats", env: map[string]string{"SANDGATE_NODE_LAPSE": "3s"}, wantErr: "SANDGATE_NODE_LAPSE (3s) must be at least twice SANDGATE_NODE_HEARTBEAT (2s)"},
		{name: "heartbeat not a duration", env: map[string]string{"SANDGATE_NODE_HEARTBEAT": "often"}, wantErr: `SANDGATE_NODE_HEARTBEAT="often" is not a positive duration`},
		{name: "advertise URL without a scheme", env: map[string]string{"SANDGATE_ADVERTISE_URL": "10.0.0.11:8080"}, wantErr: "SANDGATE_ADVERTISE_URL"},
		{name: "air-gapped not a boolean", env: map[string]string{"SANDGATE_AIR_GAPPED": "yes"}, wantErr: `SANDGATE_AIR_GAPPED="yes" is not a boolean`},
		{name: "dev not a boolean", env: map[string]string{"SANDGATE_DEV": "on"}, wantErr: `SANDGATE_DEV="on" is not a boolean`},
		{name: "concurrency not a number", env: map[string]string{"SANDGATE_MAX_CONCURRENT": "many"}, wantErr: `SANDGATE_MAX_CONCURRENT="many" is not a whole number`},
		{name: "spool size with a unit", env: map[string]string{"SANDGATE_SPOOL_MAX_BYTES": "256MiB"}, wantErr: "SANDGATE_SPOOL_MAX_BYTES"},
		{name: "backlog zero", env: map[string]string{"SANDGATE_AUDIT_MAX_BACKLOG": "0"}, wantErr: "SANDGATE_AUDIT_MAX_BACKLOG must be between 1 and 1000000, not 0"},
		{name: "backlog huge", env: map[string]string{"SANDGATE_AUDIT_MAX_BACKLOG": "99999999999999"}, wantErr: "SANDGATE_AUDIT_MAX_BACKLOG must be between"},
		{name: "capacity defaults", check: func(t *testing.T, c config) {
			// The base is a development gateway with its one principal:
			// its one team may fill the node.
			if c.MaxSessions != executor.DefaultMaxSessions() || c.MaxSessions < 2 || c.teamShare() != 100 {
				t.Errorf("capacity defaults: sessions %d, share %d", c.MaxSessions, c.teamShare())
			}
		}},
		{name: "capacity defaults with a tokens file", env: map[string]string{"SANDGATE_TOKENS_FILE": "/nonexistent/tokens.yaml"}, check: func(t *testing.T, c config) {
			if c.teamShare() != sandgate.DefaultTeamSharePercent {
				t.Errorf("team share with a tokens file: %d, want %d", c.teamShare(), sandgate.DefaultTeamSharePercent)
			}
		}},
		{name: "capacity defaults with an identity provider", env: map[string]string{"SANDGATE_OIDC_ISSUER": "https://idp.example.test", "SANDGATE_OIDC_AUDIENCE": "sandgate"}, check: func(t *testing.T, c config) {
			if c.teamShare() != sandgate.DefaultTeamSharePercent {
				t.Errorf("team share with an identity provider: %d, want %d", c.teamShare(), sandgate.DefaultTeamSharePercent)
			}
		}},
		{name: "capacity values", env: map[string]string{"SANDGATE_MAX_SESSIONS": "12", "SANDGATE_TEAM_SHARE": "100"}, check: func(t *testing.T, c config) {
			if c.MaxSessions != 12 || c.teamShare() != 100 {
				t.Errorf("capacity values: sessions %d, share %d", c.MaxSessions, c.TeamShare)
			}
		}},
		{name: "sessions negative", env: map[string]string{"SANDGATE_MAX_SESSIONS": "-1"}, wantErr: "SANDGATE_MAX_SESSIONS must be between 1 and 1024, not -1"},
		{name: "sessions not a number", env: map[string]string{"SANDGATE_MAX_SESSIONS": "lots"}, wantErr: `SANDGATE_MAX_SESSIONS="lots" is not a whole number`},
		{name: "team share negative", env: map[string]string{"SANDGATE_TEAM_SHARE": "-1"}, wantErr: "SANDGATE_TEAM_SHARE must be a percent between 1 and 100 (0: the default), not -1"},
		{name: "team share over the node", env: map[string]string{"SANDGATE_TEAM_SHARE": "150"}, wantErr: "SANDGATE_TEAM_SHARE must be a percent between 1 and 100 (0: the default), not 150"},
		{name: "warm pool negative", env: map[string]string{"SANDGATE_WARM_POOL": "-1"}, wantErr: "SANDGATE_WARM_POOL must be between 0 and 64"},
		{name: "docker call defaults", check: func(t *testing.T, c config) {
			if c.DockerRetries != 4 || c.DockerBackoff != 100*time.Millisecond || c.DockerBackoffMax != 2*time.Second ||
				c.DockerCallTimeout != 30*time.Second || c.PullTimeout != 5*time.Minute || c.CPUThrottleShare != 0.25 {
				t.Errorf("docker call defaults: %+v", c.dockerCallsConfig)
			}
		}},
		{name: "docker call values", env: map[string]string{"SANDGATE_DOCKER_RETRIES": "2", "SANDGATE_DOCKER_BACKOFF": "250ms",
			"SANDGATE_DOCKER_BACKOFF_MAX": "5s", "SANDGATE_DOCKER_CALL_TIMEOUT": "45s", "SANDGATE_PULL_TIMEOUT": "20m",
			"SANDGATE_CPU_THROTTLE_SHARE": "0.5"}, check: func(t *testing.T, c config) {
			if c.DockerRetries != 2 || c.DockerBackoff != 250*time.Millisecond || c.DockerBackoffMax != 5*time.Second ||
				c.DockerCallTimeout != 45*time.Second || c.PullTimeout != 20*time.Minute || c.CPUThrottleShare != 0.5 {
				t.Errorf("docker call values not applied: %+v", c.dockerCallsConfig)
			}
			b := c.backoff()()
			if d, stop := b.Next(); stop || d < 225*time.Millisecond || d > 275*time.Millisecond {
				t.Errorf("first backoff = %v (stop %v), want 250ms ± 10 %%", d, stop)
			}
		}},
		{name: "retries zero", env: map[string]string{"SANDGATE_DOCKER_RETRIES": "0"}, wantErr: "SANDGATE_DOCKER_RETRIES must be between 1 and 20, not 0"},
		{name: "retries huge", env: map[string]string{"SANDGATE_DOCKER_RETRIES": "1000"}, wantErr: "SANDGATE_DOCKER_RETRIES must be between 1 and 20, not 1000"},
		{name: "retries not a number", env: map[string]string{"SANDGATE_DOCKER_RETRIES": "few"}, wantErr: `SANDGATE_DOCKER_RETRIES="few" is not a whole number`},
		{name: "backoff zero", env: map[string]string{"SANDGATE_DOCKER_BACKOFF": "0s"}, wantErr: `SANDGATE_DOCKER_BACKOFF="0s" is not a positive duration`},
		{name: "backoff without a unit", env: map[string]string{"SANDGATE_DOCKER_BACKOFF": "100"}, wantErr: "SANDGATE_DOCKER_BACKOFF"},
		{name: "backoff too long", env: map[string]string{"SANDGATE_DOCKER_BACKOFF": "1m"}, wantErr: "SANDGATE_DOCKER_BACKOFF must be between 1ms and 10s"},
		{name: "backoff cap below the first wait", env: map[string]string{"SANDGATE_DOCKER_BACKOFF": "3s"}, wantErr: "SANDGATE_DOCKER_BACKOFF_MAX must be between SANDGATE_DOCKER_BACKOFF (3s) and 1m, not 2s"},
		{name: "call timeout too short", env: map[string]string{"SANDGATE_DOCKER_CALL_TIMEOUT": "10ms"}, wantErr: "SANDGATE_DOCKER_CALL_TIMEOUT must be between 1s and 10m"},
		{name: "call timeout negative", env: map[string]string{"SANDGATE_DOCKER_CALL_TIMEOUT": "-5s"}, wantErr: "SANDGATE_DOCKER_CALL_TIMEOUT"},
		{name: "pull timeout too short", env: map[string]string{"SANDGATE_PULL_TIMEOUT": "1s"}, wantErr: "SANDGATE_PULL_TIMEOUT must be between 10s and 6h, not 1s"},
		{name: "pull timeout forever", env: map[string]string{"SANDGATE_PULL_TIMEOUT": "10000h"}, wantErr: "SANDGATE_PULL_TIMEOUT must be between 10s and 6h"},
		{name: "throttle share above one", env: map[string]string{"SANDGATE_CPU_THROTTLE_SHARE": "1.5"}, wantErr: "SANDGATE_CPU_THROTTLE_SHARE must be above 0 and at most 1, not 1.5"},
		{name: "throttle share not a number", env: map[string]string{"SANDGATE_CPU_THROTTLE_SHARE": "NaN"}, wantErr: "SANDGATE_CPU_THROTTLE_SHARE must be above 0"},
		{name: "throttle share a percentage", env: map[string]string{"SANDGATE_CPU_THROTTLE_SHARE": "25%"}, wantErr: `SANDGATE_CPU_THROTTLE_SHARE="25%" is not a number`},
		{name: "two bad values", env: map[string]string{"SANDGATE_MIGRATE": "maybe", "SANDGATE_WARM_POOL": "x"}, wantErr: `SANDGATE_MIGRATE="maybe" is not a boolean (true or false, 1 or 0); SANDGATE_WARM_POOL="x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range base {
				env[k] = v
			}
			for k, v := range tt.env {
				env[k] = v
			}
			c := readConfig(func(k string) string { return env[k] })
			err := validateAll(c.server()...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Validate = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Validate = %v", err)
			}
			tt.check(t, c)
		})
	}
}

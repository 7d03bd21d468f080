package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sethvargo/go-retry"
)

// dockerCallsConfig is how the executor calls the Docker daemon: the
// retries of a call that failed for a transient reason and the waits
// between them, the bound on one attempt of a quick call, and the bound
// on one attempt of an image pull. Each is validated at start, naming its
// variable: a daemon call that may never time out, or retries that could
// hold a run for hours, are refused rather than clamped.
type dockerCallsConfig struct {
	DockerRetries     int           // SANDGATE_DOCKER_RETRIES: retries after the first attempt, 1 to 20
	DockerBackoff     time.Duration // SANDGATE_DOCKER_BACKOFF: the first wait, 1ms to 10s
	DockerBackoffMax  time.Duration // SANDGATE_DOCKER_BACKOFF_MAX: the longest wait, from the first to 1m
	DockerCallTimeout time.Duration // SANDGATE_DOCKER_CALL_TIMEOUT: one attempt of a quick call, 1s to 10m
	PullTimeout       time.Duration // SANDGATE_PULL_TIMEOUT: one attempt of an image pull, 10s to 6h
	// CPUThrottleShare is the share of a run's wall time spent throttled
	// by its CPU limit above which the run's trail records
	// run.cpu_throttled (SANDGATE_CPU_THROTTLE_SHARE, 0 < share ≤ 1).
	CPUThrottleShare float64
	invalid          []string
}

// The defaults of dockerCallsConfig.
const (
	defaultDockerRetries     = 4
	defaultDockerBackoff     = 100 * time.Millisecond
	defaultDockerBackoffMax  = 2 * time.Second
	defaultDockerCallTimeout = 30 * time.Second
	defaultPullTimeout       = 5 * time.Minute
	defaultCPUThrottleShare  = 0.25
)

func readDockerCallsConfig(getenv func(string) string) dockerCallsConfig {
	c := dockerCallsConfig{DockerRetries: defaultDockerRetries, DockerBackoff: defaultDockerBackoff, DockerBackoffMax: defaultDockerBackoffMax,
		DockerCallTimeout: defaultDockerCallTimeout, PullTimeout: defaultPullTimeout, CPUThrottleShare: defaultCPUThrottleShare}
	e := envReader{getenv: getenv}
	e.int("SANDGATE_DOCKER_RETRIES", &c.DockerRetries)
	e.duration("SANDGATE_DOCKER_BACKOFF", &c.DockerBackoff, true, "100ms")
	e.duration("SANDGATE_DOCKER_BACKOFF_MAX", &c.DockerBackoffMax, true, "2s")
	e.duration("SANDGATE_DOCKER_CALL_TIMEOUT", &c.DockerCallTimeout, true, "30s")
	e.duration("SANDGATE_PULL_TIMEOUT", &c.PullTimeout, true, "5m")
	if v := getenv("SANDGATE_CPU_THROTTLE_SHARE"); v != "" {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			e.invalid = append(e.invalid, fmt.Sprintf("SANDGATE_CPU_THROTTLE_SHARE=%q is not a number (such as 0.25)", v))
		}
		c.CPUThrottleShare = f
	}
	c.invalid = e.invalid
	return c
}

// Validate refuses a setting out of its range, naming the variable.
func (c *dockerCallsConfig) Validate() error {
	if err := invalidError(c.invalid); err != nil {
		return err
	}
	switch {
	case c.DockerRetries < 1 || c.DockerRetries > 20:
		return fmt.Errorf("SANDGATE_DOCKER_RETRIES must be between 1 and 20, not %d", c.DockerRetries)
	case c.DockerBackoff < time.Millisecond || c.DockerBackoff > 10*time.Second:
		return fmt.Errorf("SANDGATE_DOCKER_BACKOFF must be between 1ms and 10s, not %s", c.DockerBackoff)
	case c.DockerBackoffMax < c.DockerBackoff || c.DockerBackoffMax > time.Minute:
		return fmt.Errorf("SANDGATE_DOCKER_BACKOFF_MAX must be between SANDGATE_DOCKER_BACKOFF (%s) and 1m, not %s", c.DockerBackoff, c.DockerBackoffMax)
	case c.DockerCallTimeout < time.Second || c.DockerCallTimeout > 10*time.Minute:
		return fmt.Errorf("SANDGATE_DOCKER_CALL_TIMEOUT must be between 1s and 10m, not %s", c.DockerCallTimeout)
	case c.PullTimeout < 10*time.Second || c.PullTimeout > 6*time.Hour:
		return fmt.Errorf("SANDGATE_PULL_TIMEOUT must be between 10s and 6h, not %s", c.PullTimeout)
	case !(c.CPUThrottleShare > 0 && c.CPUThrottleShare <= 1):
		return fmt.Errorf("SANDGATE_CPU_THROTTLE_SHARE must be above 0 and at most 1, not %v", c.CPUThrottleShare)
	}
	return nil
}

// backoff is the executor's backoff between retries: exponential from
// DockerBackoff, capped at DockerBackoffMax, with 10 % jitter.
func (c *dockerCallsConfig) backoff() func() retry.Backoff {
	first, most := c.DockerBackoff, c.DockerBackoffMax
	return func() retry.Backoff {
		return retry.WithJitterPercent(10, retry.WithCappedDuration(most, retry.NewExponential(first)))
	}
}

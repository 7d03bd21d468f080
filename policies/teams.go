package policies

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/sandgate/sandgate"
)

// teamConfig is what the bundle's data says beyond the decision: the
// limits each team is held to and what the executor must enforce for its
// runs. It is read once per revision, at load.
type teamConfig struct {
	privilegedGIDs []int64
	pullRegistries []string
	volumeQuota    perTeam[int64]
	maxVolumes     perTeam[int]
	teamLimits     perTeam[sandgate.TeamLimits]
	egressPrivate  perTeam[[]string]
	imageSigners   perTeam[map[string][]string]
	transcripts    bool
}

// perTeam is a value with a default and per-team overrides, as data
// writes {"default": …, "teams": {"payments": …}}.
type perTeam[T any] struct {
	Default T            `json:"default"`
	Teams   map[string]T `json:"teams"`
}

func (p perTeam[T]) of(team string) T {
	if v, ok := p.Teams[team]; ok {
		return v
	}
	return p.Default
}

// limits are team's limits.
func (c teamConfig) limits(team string) sandgate.TeamLimits { return c.teamLimits.of(team) }

// enforcement is what the executor holds team's runs to.
func (c teamConfig) enforcement(team string) sandgate.Enforcement {
	return sandgate.Enforcement{
		PrivilegedGIDs:      slices.Clone(c.privilegedGIDs),
		PullRegistries:      slices.Clone(c.pullRegistries),
		VolumeQuotaMB:       c.volumeQuota.of(team),
		MaxVolumes:          c.maxVolumes.of(team),
		EgressPrivateCIDRs:  slices.Clone(c.egressPrivate.of(team)),
		ImageSigners:        c.imageSigners.of(team),
		TerminalTranscripts: c.transcripts,
	}
}

// teamConfig reads data.sandgate.config's privileged_gids,
// pull_registries, volume_quota_mb and team_limits, refusing a bundle
// whose values are malformed: a mistyped limit must not silently become
// "no limit". gid 0 is privileged whatever the data says.
func (b *bundle) teamConfig() (teamConfig, error) {
	cfg := b.config()
	var c teamConfig
	if err := dataField(cfg, "privileged_gids", &c.privilegedGIDs); err != nil {
		return c, err
	}
	for _, g := range c.privilegedGIDs {
		if g < 0 || g > 1<<31-1 {
			return c, fmt.Errorf("data.sandgate.config.privileged_gids: %d is not a group ID", g)
		}
	}
	if !slices.Contains(c.privilegedGIDs, 0) {
		c.privilegedGIDs = append([]int64{0}, c.privilegedGIDs...)
	}
	if err := dataField(cfg, "pull_registries", &c.pullRegistries); err != nil {
		return c, err
	}
	for _, r := range c.pullRegistries {
		if r == "" || strings.ContainsAny(r, "/ \t@") {
			return c, fmt.Errorf("data.sandgate.config.pull_registries: %q is not a registry host[:port]", r)
		}
	}
	if err := dataField(cfg, "volume_quota_mb", &c.volumeQuota); err != nil {
		return c, err
	}
	for team, q := range c.volumeQuota.all() {
		if q < 0 {
			return c, fmt.Errorf("data.sandgate.config.volume_quota_mb: %s: %d is negative", team, q)
		}
	}
	if err := dataField(cfg, "max_volumes", &c.maxVolumes); err != nil {
		return c, err
	}
	for team, n := range c.maxVolumes.all() {
		if n < 0 {
			return c, fmt.Errorf("data.sandgate.config.max_volumes: %s: %d is negative", team, n)
		}
	}
	if err := dataField(cfg, "egress_private_cidrs", &c.egressPrivate); err != nil {
		return c, err
	}
	if err := dataField(cfg, "terminal_transcripts", &c.transcripts); err != nil {
		return c, err
	}
	if err := dataField(cfg, "image_signers", &c.imageSigners); err != nil {
		return c, err
	}
	for team, m := range c.imageSigners.all() {
		for repo, keys := range m {
			if repo == "" || strings.ContainsAny(repo, ":@ ") || len(keys) == 0 {
				return c, fmt.Errorf("data.sandgate.config.image_signers: %s: %q must be an image repository (no tag or digest) with at least one key ID", team, repo)
			}
		}
	}
	if err := dataField(cfg, "team_limits", &c.teamLimits); err != nil {
		return c, err
	}
	for team, l := range c.teamLimits.all() {
		if l.Concurrent < 0 || l.Sessions < 0 || l.Queued < 0 || l.MemoryMB < 0 || l.CPUs < 0 {
			return c, fmt.Errorf("data.sandgate.config.team_limits: %s: limits must not be negative", team)
		}
	}
	return c, nil
}

// all is every value with the name it is reported under.
func (p perTeam[T]) all() map[string]T {
	out := map[string]T{"default": p.Default}
	for k, v := range p.Teams {
		out["teams."+k] = v
	}
	return out
}

// dataField decodes cfg[key] strictly into v; a missing key leaves v as
// it is.
func dataField(cfg map[string]any, key string, v any) error {
	raw, ok := cfg[key]
	if !ok {
		return nil
	}
	data, err := json.Marshal(raw)
	if err != nil {
		return fmt.Errorf("data.sandgate.config.%s: %w", key, err)
	}
	if err := sandgate.DecodeStrict(bytes.NewReader(data), v, 1<<20); err != nil {
		return fmt.Errorf("data.sandgate.config.%s: %s", key, sandgate.ErrorMessageOf(err))
	}
	return nil
}

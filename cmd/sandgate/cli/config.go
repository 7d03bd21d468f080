package cli

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// config is the configuration of every component, each read from the
// environment (SANDGATE_*) by a reader of its own, over its defaults.
// Each command declares the components it uses (settingsOf): their
// flags, which mirror the environment, are the command's, and they are
// validated before it runs. No package below reads the environment.
type config struct {
	clientConfig
	databaseConfig
	trailConfig
	policyConfig
	executorConfig
	egressConfig
	workspaceConfig
	gatewayConfig
	nodeConfig
	sinkConfig
	secretsConfig
}

// readConfig reads every component's configuration from getenv.
func readConfig(getenv func(string) string) config {
	trail := readTrailConfig(getenv)
	return config{
		clientConfig:    readClientConfig(getenv),
		databaseConfig:  readDatabaseConfig(getenv),
		trailConfig:     trail,
		policyConfig:    readPolicyConfig(getenv),
		executorConfig:  readExecutorConfig(getenv),
		egressConfig:    readEgressConfig(getenv),
		workspaceConfig: readWorkspaceConfig(getenv),
		gatewayConfig:   readGatewayConfig(getenv, trail.stateDir()),
		nodeConfig:      readNodeConfig(getenv, trail.stateDir()),
		sinkConfig:      readSinkConfig(getenv),
		secretsConfig:   readSecretsConfig(getenv),
	}
}

// server is every component serve builds, in the order they are
// validated (and their errors listed).
func (c *config) server() []component {
	return []component{&c.gatewayConfig, &c.databaseConfig, &c.trailConfig, &c.policyConfig, &c.executorConfig,
		&c.egressConfig, &c.workspaceConfig, &c.nodeConfig, &c.sinkConfig, &c.secretsConfig}
}

// component is one component's configuration: its flags, bound to its
// fields, and Validate, which refuses a value that could not be parsed
// or is out of range, naming the variable.
type component interface {
	bindFlags(*pflag.FlagSet)
	Validate() error
}

// validateAll validates cs and joins their errors.
func validateAll(cs ...component) error {
	var msgs []string
	for _, c := range cs {
		if err := c.Validate(); err != nil {
			msgs = append(msgs, err.Error())
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return errors.New(strings.Join(msgs, "; "))
}

// use is what a command reads of one component: the component, validated
// before the command runs, and the names of its flags the command takes
// (all of them when all is set; none when the command reads the
// environment's values only).
type use struct {
	c     component
	flags []string
	all   bool
}

// bind gives the command cmd what us name: the flags are added to it,
// and the components are validated before it runs.
func (a *app) bind(cmd *cobra.Command, us []use) {
	for _, u := range us {
		all := a.flagsOf(u.c)
		if u.all {
			all.VisitAll(func(f *pflag.Flag) { cmd.Flags().AddFlag(f) })
		}
		for _, name := range u.flags {
			f := all.Lookup(name)
			if f == nil {
				panic(fmt.Sprintf("sandgate %s: no flag --%s", cmd.CommandPath(), name))
			}
			cmd.Flags().AddFlag(f)
		}
		a.checks[cmd] = append(a.checks[cmd], u.c)
	}
}

// flagsOf returns c's flags, bound to its fields once; the commands that
// take one share it.
func (a *app) flagsOf(c component) *pflag.FlagSet {
	if fs, ok := a.flagSets[c]; ok {
		return fs
	}
	fs := pflag.NewFlagSet("", pflag.ContinueOnError)
	fs.SortFlags = false
	c.bindFlags(fs)
	a.flagSets[c] = fs
	return fs
}

// envReader reads typed values from the environment into a component's
// fields, keeping the ones it could not parse: Validate refuses them
// rather than fall back to a default (SANDGATE_AIR_GAPPED=yes must not
// quietly mean false).
type envReader struct {
	getenv  func(string) string
	invalid []string
}

func (e *envReader) str(key string, dst *string) {
	if v := e.getenv(key); v != "" {
		*dst = v
	}
}

func (e *envReader) boolean(key string, dst *bool) {
	v := e.getenv(key)
	if v == "" {
		return
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		e.invalid = append(e.invalid, fmt.Sprintf("%s=%q is not a boolean (true or false, 1 or 0)", key, v))
		return
	}
	*dst = b
}

func (e *envReader) int64(key string, dst *int64) {
	v := e.getenv(key)
	if v == "" {
		return
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil {
		e.invalid = append(e.invalid, fmt.Sprintf("%s=%q is not a whole number", key, v))
		return
	}
	*dst = n
}

// int reads an integer clamped into int32's range; Validate bounds it far
// tighter.
func (e *envReader) int(key string, dst *int) {
	n := int64(*dst)
	e.int64(key, &n)
	*dst = int(max(min(n, math.MaxInt32), math.MinInt32))
}

// duration reads a duration; example names a valid one for the message.
// positive refuses zero and negative ones.
func (e *envReader) duration(key string, dst *time.Duration, positive bool, example string) {
	v := e.getenv(key)
	if v == "" {
		return
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	switch {
	case positive && (err != nil || d <= 0):
		e.invalid = append(e.invalid, fmt.Sprintf("%s=%q is not a positive duration (such as %s)", key, v, example))
	case err != nil:
		e.invalid = append(e.invalid, fmt.Sprintf("%s=%q is not a duration (such as %s)", key, v, example))
	}
	*dst = d
}

// invalidError joins the messages of values that could not be parsed.
func invalidError(invalid []string) error {
	if len(invalid) == 0 {
		return nil
	}
	return errors.New(strings.Join(invalid, "; "))
}

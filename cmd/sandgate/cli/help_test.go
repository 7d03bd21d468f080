package cli

import (
	"bytes"
	"context"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// helpOf runs `sandgate PATH --help` and returns the long flags it lists.
func helpOf(t *testing.T, path string) []string {
	t.Helper()
	var out, errOut bytes.Buffer
	args := append(strings.Fields(path), "--help")
	if err := run(context.Background(), args, func(string) string { return "" }, strings.NewReader(""), &out, &errOut); err != nil {
		t.Fatalf("sandgate %s --help: %v\n%s", path, err, errOut.String())
	}
	var flags []string
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`).FindAllStringSubmatch(out.String(), -1) {
		if m[1] != "help" {
			flags = append(flags, m[1])
		}
	}
	sort.Strings(flags)
	return flags
}

// settingFlags are the flags that mirror a setting: every component's.
func settingFlags() map[string]bool {
	a := &app{getenv: func(string) string { return "" }, flagSets: map[component]*pflag.FlagSet{}}
	a.cfg = readConfig(a.getenv)
	names := map[string]bool{}
	for _, c := range append(a.cfg.server(), &a.cfg.clientConfig) {
		a.flagsOf(c).VisitAll(func(f *pflag.Flag) { names[f.Name] = true })
	}
	return names
}

// commandPaths lists every command that does something, below root.
func commandPaths(cmd *cobra.Command) []string {
	var paths []string
	for _, c := range cmd.Commands() {
		if c.HasSubCommands() {
			paths = append(paths, commandPaths(c)...)
		} else if c.Name() != "help" && c.Name() != "completion" {
			paths = append(paths, strings.TrimPrefix(c.CommandPath(), "sandgate "))
		}
	}
	return paths
}

// TestHelpShowsOnlyTheFlagsUsed: each command's --help lists the flags of
// the settings it reads and no other: client commands the gateway's URL,
// database commands the DSN, serve every server setting. The table names
// every command, so that a new one is decided here too.
func TestHelpShowsOnlyTheFlagsUsed(t *testing.T) {
	settings := settingFlags()
	var server []string
	for name := range settings {
		if name != "url" {
			server = append(server, name)
		}
	}
	client := []string{"url"}
	dsn := []string{"database-url"}
	want := map[string][]string{
		"serve": server,
		"run":   client, "runs list": client, "runs get": client, "runs cancel": client, "runs logs": client, "runs artifacts": client,
		"session create": client, "session exec": client, "session cp": client, "session ls": client, "session rm": client, "session shell": client, "mcp": client,
		"volume list": client, "volume rm": client,
		"approvals list": client, "approvals approve": client, "approvals deny": client,
		"secrets set": client, "secrets list": client, "secrets rm": client,
		"secrets re-encrypt": {"database-url", "secrets-key-file"}, "secrets new-key": nil,
		"policy check": {"policy-dir"}, "policy test": {"policy-dir"}, "policy rules": {"policy-dir"},
		"policy eval": {"air-gapped", "mount-root", "policy-dir", "policy-verify-keys"},
		"policy sign": {"policy-dir"}, "policy verify": {"policy-dir", "policy-verify-keys"},
		"policy replay": client,
		// Through the gateway, or the database with --database-url.
		"audit query": {"database-url", "url"}, "audit export": {"database-url", "url"}, "audit receipt": {"database-url", "url"},
		"audit verify": dsn, "audit partitions": dsn,
		"audit rotate-key": dsn, "audit archive": dsn, "audit purge": dsn, "audit retention": dsn,
		// Its own --signing-key-file: which key to print.
		"audit public-key":     {"signing-key-file"},
		"audit verify-receipt": nil,
		// Its own --gateway and --token, defaulting to the client's.
		"audit witness": nil,
		// Its own --signing-key-file and --node: which key, for which node.
		"audit endorse-key": {"node", "signing-key-file"},
		"migrate up":        dsn, "migrate status": dsn,
		"image build": nil, "image load": nil, "image sign": nil, "image list": nil, "image prune": nil, "image packages": client,
		"sandbox list": nil, "sandbox cleanup": nil,
		"version": nil,
	}
	a := &app{getenv: func(string) string { return "" }, stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}
	paths := commandPaths(a.commands())
	for _, path := range paths {
		if _, ok := want[path]; !ok {
			t.Errorf("sandgate %s is not in the table: decide which settings it shows", path)
		}
	}
	for path, flags := range want {
		t.Run(path, func(t *testing.T) {
			if !slices.Contains(paths, path) {
				t.Fatalf("no command sandgate %s", path)
			}
			var got []string
			for _, f := range helpOf(t, path) {
				if settings[f] {
					got = append(got, f)
				}
			}
			sort.Strings(flags)
			if diff := cmp.Diff(flags, got, cmp.Comparer(func(a, b []string) bool { return slices.Equal(a, b) })); diff != "" {
				t.Errorf("setting flags of sandgate %s --help (-want +got):\n%s", path, diff)
			}
		})
	}
}

// TestUsageErrorExitCode: a command line sandgate cannot run (an unknown
// command or flag, a server flag given to a client command, wrong
// arguments, a setting that does not parse) exits 125 with the reason
// and where to find the usage, as `sandgate --help` says; --help exits 0.
func TestUsageErrorExitCode(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"unknown flag", []string{"run", "--bogus", "--", "true"}, nil, "unknown flag: --bogus"},
		{"server flag on a client command", []string{"runs", "list", "--database-url", "dbname=x"}, nil, "unknown flag: --database-url"},
		{"policy flag on session cp", []string{"session", "cp", "--policy-dir", "/x", "a", "b:"}, nil, "unknown flag: --policy-dir"},
		{"unknown command", []string{"frobnicate"}, nil, `unknown command "frobnicate"`},
		{"unknown subcommand", []string{"runs", "frobnicate"}, nil, `unknown command "frobnicate" for "sandgate runs"`},
		{"too many arguments", []string{"runs", "get", "a", "b"}, nil, "accepts 1 arg(s)"},
		{"missing flag value", []string{"migrate", "up", "--database-url"}, nil, "flag needs an argument"},
		{"a setting that does not parse", []string{"runs", "list"}, map[string]string{"SANDGATE_URL": "ftp://gateway"}, "SANDGATE_URL"},
		{"a server setting that does not parse", []string{"serve"}, map[string]string{"SANDGATE_DEV": "1", "SANDGATE_WARM_POOL": "some"}, `SANDGATE_WARM_POOL="some"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(context.Background(), tt.args, func(k string) string { return tt.env[k] }, strings.NewReader(""), &out, &errOut)
			if err == nil {
				t.Fatal("the command line was run")
			}
			code := ExitCode(err, &errOut)
			if code != exitUsage || !strings.Contains(errOut.String(), tt.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errOut.String(), exitUsage, tt.want)
			}
		})
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"run", "--help"}, func(string) string { return "" }, strings.NewReader(""), &out, &out); err != nil {
		t.Errorf("run --help: %v", err)
	}
	if !strings.Contains(out.String(), "125") {
		t.Errorf("run --help does not say what 125 means:\n%s", out.String())
	}
}

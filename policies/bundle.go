// Package policies is sandgate's policy engine: it loads the Rego bundle
// (the default one embedded from this directory, or SANDGATE_POLICY_DIR),
// compiles it, runs the bundle's own Rego tests, and evaluates admission
// decisions against it, reloading it when it changes without ever failing
// open. It is the only package that imports OPA.
package policies

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/tester"

	"github.com/sandgate/sandgate"
)

// The default bundle: every Rego file and the data document of this
// directory.
//
//go:embed *.rego data.json
var embedded embed.FS

// DecisionQuery is the query the engine evaluates.
const DecisionQuery = "data.sandgate.admission.decision"

// EmbeddedSource is the Source a status reports for the embedded bundle.
const EmbeddedSource = "embedded"

// testTimeout bounds each Rego unit test while a bundle loads. A test
// takes milliseconds; the bound is for a test that never ends, and is
// wide enough that a loaded node (the race detector, other builds) does
// not refuse a good bundle at start. In an evaluator child (see
// limitSelf) the CPU limit is what stops a test that spins, so the wall
// clock waits at least four times that limit: on a loaded host a spinning
// test is still refused for its CPU, the cause the operator must see.
var testTimeout = 30 * time.Second

var decisionRef = ast.MustParseRef(DecisionQuery)

// bundleFile is one file of a bundle.
type bundleFile struct {
	name string
	data []byte
}

// bundle is a bundle read and parsed, not yet compiled.
type bundle struct {
	source   string
	files    []bundleFile
	revision string
	modules  []sandgate.PolicyModule
	// policy holds the modules that decide; tests the *_test.rego ones.
	policy map[string]*ast.Module
	tests  map[string]*ast.Module
	data   map[string]any
	// signature is who signed the bundle; nil when no keys are pinned.
	signature *Signature
}

// loadError lists everything wrong with a bundle.
type loadError struct{ errs []string }

func (e *loadError) Error() string { return strings.Join(e.errs, "; ") }

// invalid turns a load failure into the POLICY-INVALID error callers see,
// with every problem in Details["errors"].
func invalid(source string, err error) error {
	var se *sandgate.Error
	if errors.As(err, &se) {
		// Already told: the evaluator's refusal, or its absence.
		return se
	}
	var le *loadError
	errs := []string{err.Error()}
	cause := err
	if errors.As(err, &le) {
		errs, cause = le.errs, nil
	}
	return &sandgate.Error{
		Code:    sandgate.CodePolicyInvalid,
		Message: fmt.Sprintf("policy bundle %s was refused: %s", source, strings.Join(errs, "; ")),
		Details: map[string]any{"errors": errs},
		Err:     cause,
	}
}

// bundleFS returns the file system a bundle is read from: dir, or the
// embedded bundle when dir is empty.
func bundleFS(dir string) (fs.FS, string) {
	if dir == "" {
		return embedded, EmbeddedSource
	}
	return os.DirFS(dir), dir
}

// readBundle reads and parses the bundle in dir ("" for the embedded one).
// A bundle is the *.rego and *.json files at the top of the directory;
// hidden files and subdirectories are ignored, symlinks are followed. Each
// JSON file is merged into the data document at its root.
func readBundle(dir string) (*bundle, error) {
	files, source, err := readBundleFiles(dir)
	if err != nil {
		return nil, err
	}
	return parseBundle(source, files)
}

// readVerifiedBundle is readBundle for an engine: with keys pinned, the
// files read are loaded only if a signature by one of the keys covers each
// of them (verify), and the bundle records who signed it. The files
// verified are the bytes parsed: nothing is read twice.
func readVerifiedBundle(dir string, keys *VerifyKeys) (*bundle, error) {
	files, source, err := readBundleFiles(dir)
	if err != nil {
		return nil, err
	}
	var sig *Signature
	if keys != nil {
		if dir == "" {
			return nil, &loadError{[]string{"the embedded bundle is not signed: with SANDGATE_POLICY_VERIFY_KEYS set, SANDGATE_POLICY_DIR names a signed bundle"}}
		}
		fsys, _ := bundleFS(dir)
		signed, err := readSignedFiles(fsys)
		if err != nil {
			return nil, &loadError{[]string{err.Error()}}
		}
		s, err := keys.verify(files, signed)
		if err != nil {
			return nil, &loadError{[]string{err.Error()}}
		}
		sig = &s
	}
	b, err := parseBundle(source, files)
	if err != nil {
		return nil, err
	}
	b.signature = sig
	return b, nil
}

// readBundleFiles reads the files of the bundle in dir ("" for the
// embedded one), as readBundle describes them.
func readBundleFiles(dir string) ([]bundleFile, string, error) {
	fsys, source := bundleFS(dir)
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, source, &loadError{[]string{fmt.Sprintf("read %s: %v", source, err)}}
	}
	var files []bundleFile
	var errs []string
	for _, e := range entries {
		name := e.Name()
		ext := path.Ext(name)
		if strings.HasPrefix(name, ".") || (ext != ".rego" && ext != ".json") {
			continue
		}
		info, err := fs.Stat(fsys, name)
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		data, err := fs.ReadFile(fsys, name)
		if err != nil {
			errs = append(errs, fmt.Sprintf("read %s: %v", name, err))
			continue
		}
		files = append(files, bundleFile{name: name, data: data})
	}
	if len(errs) > 0 {
		return nil, source, &loadError{errs}
	}
	return files, source, nil
}

// parseBundle parses the files of a bundle read from source: each *.rego
// file a module, each *.json file merged into the data document at its
// root. The revision digests the files' names and contents in name order.
func parseBundle(source string, files []bundleFile) (*bundle, error) {
	b := &bundle{source: source, files: files, policy: map[string]*ast.Module{}, tests: map[string]*ast.Module{}, data: map[string]any{}}
	var errs []string
	sort.Slice(b.files, func(i, j int) bool { return b.files[i].name < b.files[j].name })

	h := sha256.New()
	for _, f := range b.files {
		sum := sha256.Sum256(f.data)
		b.modules = append(b.modules, sandgate.PolicyModule{Name: f.name, SHA256: hex.EncodeToString(sum[:])})
		fmt.Fprintf(h, "%s\x00%d\x00", f.name, len(f.data))
		h.Write(f.data)
	}
	b.revision = "sha256:" + hex.EncodeToString(h.Sum(nil))

	for _, f := range b.files {
		switch path.Ext(f.name) {
		case ".rego":
			m, err := ast.ParseModuleWithOpts(f.name, string(f.data), ast.ParserOptions{RegoVersion: ast.RegoV1, ProcessAnnotation: true})
			if err != nil {
				errs = append(errs, astErrors(err)...)
				continue
			}
			if strings.HasSuffix(f.name, "_test.rego") {
				b.tests[f.name] = m
			} else {
				b.policy[f.name] = m
			}
		case ".json":
			var doc map[string]any
			dec := json.NewDecoder(bytes.NewReader(f.data))
			dec.UseNumber()
			if err := dec.Decode(&doc); err != nil {
				errs = append(errs, fmt.Sprintf("%s: not a JSON object: %v", f.name, err))
				continue
			}
			if _, err := dec.Token(); err != io.EOF {
				errs = append(errs, fmt.Sprintf("%s: unexpected data after the JSON object", f.name))
				continue
			}
			if err := mergeData(b.data, doc, ""); err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", f.name, err))
			}
		}
	}
	if len(errs) > 0 {
		return nil, &loadError{errs}
	}
	return b, nil
}

// mergeData merges src into dst; two files may not both set one leaf.
func mergeData(dst, src map[string]any, at string) error {
	for k, v := range src {
		p := at + "/" + k
		old, ok := dst[k]
		if !ok {
			dst[k] = v
			continue
		}
		om, ok1 := old.(map[string]any)
		nm, ok2 := v.(map[string]any)
		if !ok1 || !ok2 {
			return fmt.Errorf("data %s is set by more than one file", p)
		}
		if err := mergeData(om, nm, p); err != nil {
			return err
		}
	}
	return nil
}

// astErrors lists a parser's or compiler's errors, each with its location.
func astErrors(err error) []string {
	var errs ast.Errors
	if errors.As(err, &errs) {
		out := make([]string, 0, len(errs))
		for _, e := range errs {
			out = append(out, e.Error())
		}
		return out
	}
	return []string{err.Error()}
}

// capabilities are the built-ins a bundle may call: OPA's, less those that
// reach the network or the gateway's environment, so that a decision
// depends only on its input, the bundle's data and the evaluation time.
func capabilities() *ast.Capabilities {
	c := ast.CapabilitiesForThisVersion()
	denied := map[string]bool{"http.send": true, "net.lookup_ip_addr": true, "opa.runtime": true}
	kept := c.Builtins[:0:0]
	for _, bi := range c.Builtins {
		if !denied[bi.Name] {
			kept = append(kept, bi)
		}
	}
	c.Builtins = kept
	c.AllowNet = []string{}
	return c
}

// compile compiles the bundle's deciding modules (tests excluded) and
// checks that they define the decision.
func (b *bundle) compile() (*ast.Compiler, error) {
	c := ast.NewCompiler().
		WithCapabilities(capabilities()).
		WithStrict(true).
		WithEnablePrintStatements(false)
	if c.Compile(b.policy); c.Failed() {
		return nil, &loadError{astErrors(c.Errors)}
	}
	if len(c.GetRulesExact(decisionRef)) == 0 {
		return nil, &loadError{[]string{fmt.Sprintf("the bundle does not define %s", DecisionQuery)}}
	}
	return c, nil
}

// store returns an in-memory store holding the bundle's data, handing out
// AST values so that evaluation converts nothing.
func (b *bundle) store() storage.Store {
	return inmem.NewFromObjectWithOpts(b.data, inmem.OptRoundTripOnWrite(false), inmem.OptReturnASTValuesOnRead(true))
}

// allModules are the deciding and the test modules together.
func (b *bundle) allModules() map[string]*ast.Module {
	all := make(map[string]*ast.Module, len(b.policy)+len(b.tests))
	for k, v := range b.policy {
		all[k] = v
	}
	for k, v := range b.tests {
		all[k] = v
	}
	return all
}

// runTests runs the bundle's Rego unit tests and returns every result.
func (b *bundle) runTests(ctx context.Context, store storage.Store, trace bool) ([]*tester.Result, error) {
	compiler := ast.NewCompiler().
		WithCapabilities(capabilities()).
		WithStrict(true).
		WithEnablePrintStatements(true)
	ch, err := tester.NewRunner().
		SetCompiler(compiler).
		SetStore(store).
		SetModules(b.allModules()).
		SetDefaultRegoVersion(ast.RegoV1).
		SetTimeout(testTimeout).
		CapturePrintOutput(true).
		EnableTracing(trace).
		RaiseBuiltinErrors(true).
		RunTests(ctx, nil)
	if err != nil {
		return nil, &loadError{astErrors(err)}
	}
	var results []*tester.Result
	for r := range ch {
		results = append(results, r)
	}
	sort.Slice(results, func(i, j int) bool {
		return results[i].Package+"."+results[i].Name < results[j].Package+"."+results[j].Name
	})
	return results, nil
}

// testFailures describes every failed test of results.
func testFailures(results []*tester.Result) []string {
	var errs []string
	for _, r := range results {
		if r.Pass() || r.Skip {
			continue
		}
		where := ""
		if r.Location != nil {
			where = fmt.Sprintf("%s:%d: ", r.Location.File, r.Location.Row)
		}
		msg := fmt.Sprintf("%stest %s.%s failed", where, r.Package, r.Name)
		if r.Error != nil {
			msg += ": " + r.Error.Error()
		}
		if out := strings.TrimSpace(string(r.Output)); out != "" {
			msg += " (output: " + out + ")"
		}
		errs = append(errs, msg)
	}
	return errs
}

// config returns data.sandgate.config, or nil.
func (b *bundle) config() map[string]any {
	sg, _ := b.data["sandgate"].(map[string]any)
	cfg, _ := sg["config"].(map[string]any)
	return cfg
}

// defaults reads data.sandgate.config.defaults; fields it leaves out fall
// back to sandgate.BuiltinDefaults inside Normalize.
func (b *bundle) defaults() (sandgate.Defaults, error) {
	var d sandgate.Defaults
	raw, ok := b.config()["defaults"]
	if !ok {
		return d, nil
	}
	data, err := json.Marshal(raw)
	if err != nil {
		return d, err
	}
	if err := sandgate.DecodeStrict(bytes.NewReader(data), &d, 1<<20); err != nil {
		return d, fmt.Errorf("data.sandgate.config.defaults: %s", sandgate.ErrorMessageOf(err))
	}
	return d, nil
}

// mask reads data.sandgate.config.mask: the spec fields the audit trail
// stores only as keyed hashes.
func (b *bundle) mask() ([]string, error) {
	raw, ok := b.config()["mask"]
	if !ok {
		return nil, nil
	}
	list, ok := raw.([]any)
	if !ok {
		return nil, fmt.Errorf("data.sandgate.config.mask must be an array of field paths")
	}
	out := make([]string, 0, len(list))
	for _, v := range list {
		s, ok := v.(string)
		if !ok || s == "" {
			return nil, fmt.Errorf("data.sandgate.config.mask must be an array of field paths, not %v", v)
		}
		out = append(out, s)
	}
	return out, nil
}

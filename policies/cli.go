package policies

import (
	"context"
	"io"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/tester"

	"github.com/sandgate/sandgate"
)

// Summary describes a bundle that compiled.
type Summary struct {
	Source   string                  `json:"source"`
	Revision string                  `json:"revision"`
	Modules  []sandgate.PolicyModule `json:"modules"`
	// Tests is how many test modules (*_test.rego) the bundle has.
	Tests int `json:"test_modules"`
}

// Check reads and compiles the bundle in dir ("" for the embedded one),
// test modules included, without running anything. A bundle that does not
// compile, does not define the decision or has a rule without its
// METADATA is a POLICY-INVALID error with every problem in
// Details["errors"].
func Check(_ context.Context, dir string) (Summary, error) {
	b, err := readBundle(dir)
	if err != nil {
		_, source := bundleFS(dir)
		return Summary{}, invalid(source, err)
	}
	compiler, err := b.compile()
	if err != nil {
		return Summary{}, invalid(b.source, err)
	}
	if _, err := ruleInfos(compiler); err != nil {
		return Summary{}, invalid(b.source, err)
	}
	c := ast.NewCompiler().WithCapabilities(capabilities()).WithStrict(true)
	if c.Compile(b.allModules()); c.Failed() {
		return Summary{}, invalid(b.source, &loadError{astErrors(c.Errors)})
	}
	return Summary{Source: b.source, Revision: b.revision, Modules: b.modules, Tests: len(b.tests)}, nil
}

// Rules reads and compiles the bundle in dir ("" for the embedded one)
// and describes each of its rules from their METADATA annotations,
// sorted by rule. A bundle the engine would refuse for its code or its
// annotations is a POLICY-INVALID error.
func Rules(_ context.Context, dir string) ([]RuleInfo, error) {
	b, err := readBundle(dir)
	if err != nil {
		_, source := bundleFS(dir)
		return nil, invalid(source, err)
	}
	compiler, err := b.compile()
	if err != nil {
		return nil, invalid(b.source, err)
	}
	infos, err := ruleInfos(compiler)
	if err != nil {
		return nil, invalid(b.source, err)
	}
	return infos, nil
}

// TestReport counts the outcomes of a bundle's Rego unit tests.
type TestReport struct {
	Passed  int `json:"passed"`
	Failed  int `json:"failed"`
	Errored int `json:"errored"`
	Skipped int `json:"skipped"`
}

// OK reports whether every test that ran passed.
func (r TestReport) OK() bool { return r.Failed == 0 && r.Errored == 0 }

// RunTests runs the Rego unit tests of the bundle in dir ("" for the
// embedded one) and writes OPA's report to w: failures with the failing
// expression and local variables, and every test when verbose. A bundle
// that cannot be read or compiled is a POLICY-INVALID error.
func RunTests(ctx context.Context, dir string, w io.Writer, verbose bool) (TestReport, error) {
	var rep TestReport
	b, err := readBundle(dir)
	if err != nil {
		_, source := bundleFS(dir)
		return rep, invalid(source, err)
	}
	results, err := b.runTests(ctx, b.store(), true)
	if err != nil {
		return rep, invalid(b.source, err)
	}
	ch := make(chan *tester.Result, len(results))
	for _, r := range results {
		switch {
		case r.Skip:
			rep.Skipped++
		case r.Error != nil:
			rep.Errored++
		case r.Fail:
			rep.Failed++
		default:
			rep.Passed++
		}
		ch <- r
	}
	close(ch)
	reporter := tester.PrettyReporter{Output: w, Verbose: verbose, FailureLine: true, LocalVars: true}
	if err := reporter.Report(ch); err != nil {
		return rep, err
	}
	return rep, nil
}

package policies

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
)

func TestProf2(t *testing.T) {
	src, _ := os.ReadFile("/tmp/x.rego")
	m := ast.MustParseModuleWithOpts(string(src), ast.ParserOptions{RegoVersion: ast.RegoV1})
	c := ast.NewCompiler()
	c.Compile(map[string]*ast.Module{"x": m})
	for _, q := range []string{"true", "data.x.a", "data.x.b", "data.x.c", "data.x.d", "data.x.e", "true"} {
		pq, _ := rego.New(rego.Query(q), rego.Compiler(c)).PrepareForEval(context.Background())
		n := 20000
		start := time.Now()
		for range n {
			pq.Eval(context.Background(), rego.EvalParsedInput(ast.NewObject()))
		}
		fmt.Printf("%-20s %v\n", q, time.Since(start)/time.Duration(n))
	}
}

package e2e

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/chromedp/chromedp"
)

// axeSource is axe-core, Deque's accessibility engine, from npm
// (axe-core 4.10.3, MPL-2.0: testdata/axe/LICENSE), vendored so that the
// browser tests need no network.
//
//go:embed testdata/axe/axe.min.js
var axeSource string

// axeViolation is one rule axe-core found broken on a page.
type axeViolation struct {
	ID     string `json:"id"`
	Impact string `json:"impact"`
	Help   string `json:"help"`
	Nodes  []struct {
		Target []any  `json:"target"`
		HTML   string `json:"html"`
	} `json:"nodes"`
}

// axe runs axe-core on the page as it is now (WCAG 2.0, 2.1 and 2.2 A and
// AA, and best practices) and returns the violations of serious or
// critical impact. The engine is evaluated through the DevTools protocol,
// not loaded by the page: the console's CSP (script-src 'self', Trusted
// Types) stays in force, and the page itself is checked as served.
func (b *browserSession) axe(page string) []axeViolation {
	b.t.Helper()
	if !evalIn[bool](b, `typeof window.axe === 'object'`) {
		evalIn[bool](b, axeSource+"\n;true")
	}
	raw := evalIn[string](b, `(async () => {
		const r = await axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'wcag22aa', 'best-practice']}, resultTypes: ['violations']});
		return JSON.stringify(r.violations.filter(v => v.impact === 'serious' || v.impact === 'critical')
			.map(v => ({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 5).map(n => ({target: n.target, html: n.html.slice(0, 200)}))})));
	})()`, chromedp.EvalAwaitPromise)
	var out []axeViolation
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		b.t.Fatalf("axe on %s: %v: %s", page, err, raw)
	}
	return out
}

// checkAxe fails the test for each serious or critical violation on page.
func (b *browserSession) checkAxe(page string) {
	b.t.Helper()
	for _, v := range b.axe(page) {
		var nodes []string
		for _, n := range v.Nodes {
			nodes = append(nodes, fmt.Sprintf("%v %s", n.Target, n.HTML))
		}
		b.t.Errorf("axe on %s: %s (%s): %s\n  %s", page, v.ID, v.Impact, v.Help, strings.Join(nodes, "\n  "))
	}
}

package main

import (
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"
)

// The drawing: a line chart with a logarithmic x axis (the sizes grow
// tenfold), a linear or logarithmic y axis, a dashed goal line and a
// legend.

const (
	width, height            = 720, 420
	left, right, top, bottom = 70, 220, 40, 50
)

var colours = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"}

// axis maps values onto a pixel range, linearly or by their logarithm.
type axis struct {
	lo, hi     float64
	log        bool
	from, span float64 // pixels
}

func (a axis) at(v float64) float64 {
	f := func(x float64) float64 {
		if a.log {
			return math.Log10(x)
		}
		return x
	}
	return a.from + a.span*(f(v)-f(a.lo))/(f(a.hi)-f(a.lo))
}

// ticks are the axis's labelled values: powers of ten (with 2 and 5
// between when few), or five even steps on a linear axis.
func (a axis) ticks() []float64 {
	var out []float64
	if a.log {
		for e := math.Floor(math.Log10(a.lo)); e <= math.Ceil(math.Log10(a.hi)); e++ {
			for _, m := range []float64{1, 2, 5} {
				v := m * math.Pow(10, e)
				if v >= a.lo*0.999 && v <= a.hi*1.001 && (m == 1 || math.Log10(a.hi/a.lo) < 3) {
					out = append(out, v)
				}
			}
		}
		return out
	}
	step := niceStep((a.hi - a.lo) / 5)
	for v := math.Ceil(a.lo/step) * step; v <= a.hi+step/1000; v += step {
		out = append(out, v)
	}
	return out
}

func niceStep(raw float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// label writes v shortly: 10k, 1M, 0.5, 250.
func label(v float64) string {
	switch {
	case v >= 1e6 && math.Mod(v, 1e6) == 0:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case v >= 1e3 && math.Mod(v, 1e3) == 0:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

// render draws the chart from res; false when res has none of its data.
func (c chart) render(res results) (string, bool) {
	var all [][]point
	xlo, xhi, ylo, yhi := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range c.lines {
		ps := res.points(c.bench, s.metric)
		all = append(all, ps)
		for _, p := range ps {
			xlo, xhi = math.Min(xlo, p.x), math.Max(xhi, p.x)
			if p.y > 0 || !c.logY {
				ylo, yhi = math.Min(ylo, p.y), math.Max(yhi, p.y)
			}
		}
	}
	if math.IsInf(xlo, 1) {
		return "", false
	}
	if c.goal > 0 {
		ylo, yhi = math.Min(ylo, c.goal), math.Max(yhi, c.goal)
	}
	if xlo == xhi {
		xlo, xhi = xlo/2, xhi*2
	}
	if c.logY {
		ylo, yhi = math.Pow(10, math.Floor(math.Log10(ylo))), math.Pow(10, math.Ceil(math.Log10(yhi)))
	} else {
		ylo, yhi = 0, yhi*1.15
	}
	x := axis{lo: xlo, hi: xhi, log: true, from: left, span: width - left - right}
	y := axis{lo: ylo, hi: yhi, log: c.logY, from: height - bottom, span: -(height - top - bottom)}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="14" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(c.title))
	for _, t := range y.ticks() {
		py := y.at(t)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n",
			left, py, width-right, py, left-6, py+4, label(t))
	}
	for _, p := range all[0] {
		px := x.at(p.x)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/><text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n",
			px, top, px, height-bottom, px, height-bottom+16, label(p.x))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#444"/>`+"\n", left, top, width-left-right, height-top-bottom)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", left+(width-left-right)/2, height-12, html.EscapeString(c.xLabel))
	fmt.Fprintf(&b, `<text x="16" y="%d" text-anchor="middle" transform="rotate(-90 16 %d)">%s</text>`+"\n", top+(height-top-bottom)/2, top+(height-top-bottom)/2, html.EscapeString(c.yLabel))
	legendY := top + 10
	if c.goal > 0 {
		gy := y.at(c.goal)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#000" stroke-dasharray="6 4"/>`+"\n", left, gy, width-right, gy)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#000" stroke-dasharray="6 4"/><text x="%d" y="%d">%s</text>`+"\n",
			width-right+12, legendY, width-right+36, legendY, width-right+42, legendY+4, html.EscapeString(c.goalLabel))
		legendY += 20
	}
	for i, ps := range all {
		col := colours[i%len(colours)]
		var path []string
		for _, p := range ps {
			if c.logY && p.y <= 0 {
				continue
			}
			path = append(path, fmt.Sprintf("%.1f,%.1f", x.at(p.x), y.at(p.y)))
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"><title>%s at %s: %s</title></circle>`+"\n",
				x.at(p.x), y.at(p.y), col, html.EscapeString(c.lines[i].label), label(p.x), strconv.FormatFloat(p.y, 'g', 4, 64))
		}
		if len(path) > 1 {
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(path, " "), col)
		}
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/><text x="%d" y="%d">%s</text>`+"\n",
			width-right+12, legendY, width-right+36, legendY, col, width-right+42, legendY+4, html.EscapeString(c.lines[i].label))
		legendY += 20
	}
	b.WriteString("</svg>\n")
	return b.String(), true
}

// charts.js draws the overview's charts as SVG built with the DOM, from
// numbers the page computed out of API answers. Every chart is an
// <svg role="img"> with a text title, and its numbers are also in a
// table under it for screen readers and for copying.

import {h, s, table} from './dom.js';

let seq = 0;

function niceMax(v) {
  if (v <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function ticks(max, n = 4) {
  const out = [];
  for (let i = 0; i <= n; i++) out.push((max * i) / n);
  return out;
}

const fmtTick = (v, unit) => (unit === 'ms' ? (v >= 1000 ? `${(v / 1000).toFixed(v >= 10_000 ? 0 : 1)} s` : `${Math.round(v)} ms`) : (Number.isInteger(v) ? String(v) : v.toFixed(1)));

function figure(title, desc, svg, dataTable) {
  const id = `chart-${++seq}`;
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-labelledby', `${id}-t`);
  svg.prepend(s('title', {id: `${id}-t`}, `${title}. ${desc}`));
  return h('figure', {class: 'chart'},
    h('figcaption', null, title, h('span', {class: 'muted'}, ` — ${desc}`)),
    svg,
    h('details', {class: 'chart-data'}, h('summary', null, `${title}: the numbers`), dataTable));
}

function legend(series) {
  return s('g', {class: 'legend'}, series.map((se, i) => s('g', {transform: `translate(${60 + i * 130},12)`},
    s('rect', {width: 10, height: 10, y: -9, class: `fill-${se.cls}`}),
    s('text', {x: 14, class: 'tick'}, se.label))));
}

// columns draws one group of columns per bucket (time), one column per
// series: buckets are {label, values: {key: n}}, series {key, label, cls}.
export function columns(title, desc, buckets, series) {
  const W = 720; const H = 240; const L = 48; const R = 28; const T = 24; const B = 34;
  // Counts: four integer steps.
  const max = Math.max(4, Math.ceil(niceMax(Math.max(0, ...buckets.flatMap((b) => series.map((se) => b.values[se.key] || 0)))) / 4) * 4);
  const pw = W - L - R; const ph = H - T - B;
  const bw = pw / Math.max(1, buckets.length);
  const cw = Math.max(1, (bw * 0.8) / series.length);
  const y = (v) => T + ph - (v / max) * ph;
  const every = Math.ceil(buckets.length / 8);
  const svg = s('svg', {viewBox: `0 0 ${W} ${H}`, class: 'svgchart'},
    legend(series),
    ticks(max).map((t) => s('g', null,
      s('line', {x1: L, x2: W - R, y1: y(t), y2: y(t), class: 'grid'}),
      s('text', {x: L - 6, y: y(t) + 4, class: 'tick', 'text-anchor': 'end'}, fmtTick(t)))),
    buckets.map((b, i) => s('g', null,
      series.map((se, j) => {
        const v = b.values[se.key] || 0;
        const x = L + i * bw + bw * 0.1 + j * cw;
        return s('rect', {x, y: y(v), width: Math.max(1, cw - 1), height: Math.max(0, T + ph - y(v)), class: `fill-${se.cls}`},
          s('title', null, `${b.label}: ${v} ${se.label.toLowerCase()}`));
      }),
      i % every === 0 ? s('text', {x: L + i * bw + bw / 2, y: H - 14, class: 'tick', 'text-anchor': 'middle'}, b.label) : null)),
    s('line', {x1: L, x2: W - R, y1: T + ph, y2: T + ph, class: 'axis'}));
  const tbl = table(null, [{label: 'Time', cell: (b) => b.label}, ...series.map((se) => ({label: se.label, cell: (b) => String(b.values[se.key] || 0), class: 'num'}))], buckets);
  return figure(title, desc, svg, tbl);
}

// bars draws horizontal bars: items are {label, value, detail}.
export function bars(title, desc, items, cls = 'deny') {
  const W = 720; const row = 22; const L = 220; const R = 48; const T = 8;
  const H = T + Math.max(1, items.length) * row + 8;
  const max = niceMax(Math.max(0, ...items.map((it) => it.value)));
  const pw = W - L - R;
  const svg = s('svg', {viewBox: `0 0 ${W} ${H}`, class: 'svgchart'},
    items.length === 0 ? s('text', {x: W / 2, y: T + 14, class: 'tick', 'text-anchor': 'middle'}, 'none') : null,
    items.map((it, i) => {
      const yy = T + i * row;
      const w = (it.value / max) * pw;
      const label = it.label.length > 34 ? `${it.label.slice(0, 33)}…` : it.label;
      return s('g', null,
        s('text', {x: L - 8, y: yy + 15, class: 'tick', 'text-anchor': 'end'}, label),
        s('rect', {x: L, y: yy + 3, width: Math.max(1, w), height: row - 6, class: `fill-${it.cls || cls}`},
          s('title', null, `${it.label}: ${it.value}${it.detail ? ` (${it.detail})` : ''}`)),
        s('text', {x: L + w + 6, y: yy + 15, class: 'tick'}, String(it.value)));
    }));
  const tbl = table(null, [{label: 'Name', cell: (it) => it.label}, {label: 'Count', cell: (it) => String(it.value), class: 'num'},
    {label: 'Detail', cell: (it) => it.detail || ''}], items);
  return figure(title, desc, svg, tbl);
}

// lines draws one line per series over buckets ({label, values}); a
// bucket without a value for a series leaves a gap.
export function lines(title, desc, buckets, series, unit) {
  const W = 720; const H = 240; const L = 56; const R = 28; const T = 24; const B = 34;
  const all = buckets.flatMap((b) => series.map((se) => b.values[se.key])).filter((v) => typeof v === 'number');
  const max = niceMax(Math.max(0, ...all));
  const pw = W - L - R; const ph = H - T - B;
  const step = pw / Math.max(1, buckets.length);
  const x = (i) => L + step * i + step / 2;
  const y = (v) => T + ph - (v / max) * ph;
  const every = Math.ceil(buckets.length / 8);
  const svg = s('svg', {viewBox: `0 0 ${W} ${H}`, class: 'svgchart'},
    legend(series),
    ticks(max).map((t) => s('g', null,
      s('line', {x1: L, x2: W - R, y1: y(t), y2: y(t), class: 'grid'}),
      s('text', {x: L - 6, y: y(t) + 4, class: 'tick', 'text-anchor': 'end'}, fmtTick(t, unit)))),
    buckets.map((b, i) => (i % every === 0 ? s('text', {x: x(i), y: H - 14, class: 'tick', 'text-anchor': 'middle'}, b.label) : null)),
    series.map((se) => {
      let d = '';
      let pen = false;
      const dots = [];
      buckets.forEach((b, i) => {
        const v = b.values[se.key];
        if (typeof v !== 'number') { pen = false; return; }
        d += `${pen ? 'L' : 'M'}${x(i).toFixed(1)},${y(v).toFixed(1)} `;
        pen = true;
        dots.push(s('circle', {cx: x(i), cy: y(v), r: 3, class: `fill-${se.cls}`}, s('title', null, `${b.label}: ${se.label} ${fmtTick(v, unit)}`)));
      });
      return s('g', null, d ? s('path', {d: d.trim(), class: `line stroke-${se.cls}`}) : null, dots);
    }),
    s('line', {x1: L, x2: W - R, y1: T + ph, y2: T + ph, class: 'axis'}));
  const tbl = table(null, [{label: 'Time', cell: (b) => b.label},
    ...series.map((se) => ({label: se.label, cell: (b) => (typeof b.values[se.key] === 'number' ? fmtTick(b.values[se.key], unit) : '—'), class: 'num'}))], buckets);
  return figure(title, desc, svg, tbl);
}

// The overview: runs and denials over time, denials by rule, outcomes and
// start latency, computed in the page from the API's own lists (GET
// /v1/runs and GET /v1/audit/events?type=admission.denied) over the
// chosen window, and drawn as SVG. What the principal may not read is
// left out, with the role that would show it. A principal who may not
// read the trail (security staff) sees the rules' denials since the
// gateway started, from its /metrics.

import * as api from '../api.js';
import {h, fill, section, errorBox, dl} from '../dom.js';
import * as fmt from '../format.js';
import * as charts from '../charts.js';

// The most pages of 1000 read per source; a busier window is counted
// from its newest items, and the page says so.
const MAX_PAGES = 5;

const WINDOWS = {
  '24h': {label: 'last 24 hours', span: 24 * 3600e3, bucket: 3600e3},
  '7d': {label: 'last 7 days', span: 7 * 24 * 3600e3, bucket: 12 * 3600e3},
  '30d': {label: 'last 30 days', span: 30 * 24 * 3600e3, bucket: 24 * 3600e3},
};

async function readAll(path, params, key) {
  let out = [];
  let cursor = null;
  for (let i = 0; i < MAX_PAGES; i++) {
    const q = {...params, limit: 1000};
    if (cursor) q.cursor = cursor;
    const page = await api.getJSON(path, q);
    out = out.concat(page[key] || []);
    cursor = page.next_cursor;
    if (!cursor) return {items: out, capped: false};
  }
  return {items: out, capped: true};
}

// percentile is the nearest-rank percentile of sorted values.
export function percentile(sorted, p) {
  if (!sorted.length) return null;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1];
}

function bucketLabel(t, w) {
  const d = new Date(t).toISOString();
  return w.bucket < 24 * 3600e3 ? `${d.slice(5, 10)} ${d.slice(11, 16)}` : d.slice(5, 10);
}

function makeBuckets(now, w) {
  const start = Math.floor((now - w.span) / w.bucket) * w.bucket;
  const out = [];
  for (let t = start; t <= now; t += w.bucket) out.push({t, label: bucketLabel(t, w), values: {}, latencies: []});
  return out;
}

function bucketOf(buckets, w, t) {
  const i = Math.floor((t - buckets[0].t) / w.bucket);
  return i >= 0 && i < buckets.length ? buckets[i] : null;
}

// ruleHitsFromMetrics reads sandgate_admission_rule_hits_total from the
// gateway's Prometheus text: denials by rule since it started.
export function ruleHitsFromMetrics(text) {
  const hits = {};
  const re = /^sandgate_admission_rule_hits_total\{([^}]*)\}\s+([0-9.eE+-]+)$/;
  for (const line of text.split('\n')) {
    const m = re.exec(line.trim());
    if (!m) continue;
    const labels = {};
    for (const lm of m[1].matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[lm[1]] = lm[2].replace(/\\(.)/g, '$1');
    if (labels.action !== 'deny' || labels.result !== 'denied') continue;
    hits[labels.rule] = (hits[labels.rule] || 0) + Number(m[2]);
  }
  return Object.entries(hits).map(([label, value]) => ({label, value})).sort((a, b) => b.value - a.value);
}

const OUTCOME_CLASS = {succeeded: 'ok', failed: 'bad', oom_killed: 'bad', timed_out: 'warn', cancelled: 'muted', error: 'bad', lost: 'warn'};

export async function render(view, ctx) {
  const key = WINDOWS[ctx.params.get('window')] ? ctx.params.get('window') : '24h';
  const w = WINDOWS[key];
  const sel = h('select', {id: 'o-window', name: 'window'}, Object.entries(WINDOWS).map(([k, v]) => h('option', {value: k, selected: k === key}, v.label)));
  sel.addEventListener('change', () => ctx.go('overview', {window: sel.value}));
  const body = h('div', {id: 'overview'}, h('p', {class: 'muted'}, 'Counting…'));
  fill(view, h('h1', null, 'Overview'),
    h('form', {class: 'filters', 'aria-label': 'Window'}, h('div', {class: 'field'}, h('label', {for: 'o-window'}, 'Window'), sel)),
    body);

  const now = Date.now();
  const since = new Date(now - w.span).toISOString();
  const canRuns = api.hasRole('submitter', 'auditor', 'admin');
  const canAudit = api.hasRole('auditor', 'admin');
  const [runsRes, deniedRes] = await Promise.all([
    canRuns ? readAll('/v1/runs', {since}, 'runs').catch((e) => ({error: e})) : null,
    canAudit ? readAll('/v1/audit/events', {type: 'admission.denied', since}, 'events').catch((e) => ({error: e})) : null,
  ]);
  if (!ctx.isCurrent()) return null;

  const buckets = makeBuckets(now, w);
  const parts = [];
  const notes = [];
  const tiles = [];
  const series = [];
  if (runsRes && !runsRes.error) {
    const runs = runsRes.items;
    if (runsRes.capped) notes.push(`Runs counted: the newest ${runs.length}.`);
    const outcomes = {};
    const lat = [];
    for (const r of runs) {
      const b = bucketOf(buckets, w, Date.parse(r.created_at));
      if (b) b.values.runs = (b.values.runs || 0) + 1;
      if (r.state === 'finished') outcomes[r.outcome || 'unknown'] = (outcomes[r.outcome || 'unknown'] || 0) + 1;
      else outcomes[r.state] = (outcomes[r.state] || 0) + 1;
      if (r.started_at) {
        const ms = Date.parse(r.started_at) - Date.parse(r.created_at);
        if (ms >= 0) { lat.push(ms); if (b) b.latencies.push(ms); }
      }
    }
    lat.sort((a, b) => a - b);
    for (const b of buckets) {
      b.latencies.sort((x, y) => x - y);
      if (b.latencies.length) { b.values.p50 = percentile(b.latencies, 50); b.values.p99 = percentile(b.latencies, 99); }
    }
    const ok = outcomes.succeeded || 0;
    const finished = runs.filter((r) => r.state === 'finished').length;
    tiles.push(['Runs', String(runs.length)], ['Succeeded', finished ? `${Math.round((100 * ok) / finished)} % of ${finished} finished` : '—'],
      ['Start latency p50', fmt.duration(percentile(lat, 50))], ['Start latency p99', fmt.duration(percentile(lat, 99))]);
    series.push({key: 'runs', label: 'Runs', cls: 'run'});
    parts.push(['outcomes', charts.bars('Outcomes', `runs created in the ${w.label}, by outcome (or state while running)`,
      Object.entries(outcomes).sort((a, b) => b[1] - a[1]).map(([label, value]) => ({label, value, cls: OUTCOME_CLASS[label] || 'run'})), 'run')]);
    parts.push(['latency', charts.lines('Start latency', `from request to container start, p50 and p99 per ${w.bucket >= 24 * 3600e3 ? 'day' : (w.bucket === 3600e3 ? 'hour' : '12 hours')}`,
      buckets, [{key: 'p50', label: 'p50', cls: 'run'}, {key: 'p99', label: 'p99', cls: 'warn'}], 'ms')]);
  } else if (runsRes && runsRes.error) {
    parts.push(['runs-error', errorBox(runsRes.error)]);
  } else {
    notes.push('Runs, outcomes and start latency need the submitter, auditor or admin role.');
  }

  if (deniedRes && !deniedRes.error) {
    const evs = deniedRes.items;
    if (deniedRes.capped) notes.push(`Denials counted: the newest ${evs.length}.`);
    const byRule = {};
    for (const e of evs) {
      const b = bucketOf(buckets, w, Date.parse(e.event_time));
      if (b) b.values.denied = (b.values.denied || 0) + 1;
      const seen = new Set();
      for (const v of (e.payload && e.payload.violations) || []) {
        if (v.action === 'warn' || seen.has(v.rule)) continue;
        seen.add(v.rule);
        const k = v.rule || '(unnamed)';
        byRule[k] = byRule[k] || {value: 0, controls: new Set()};
        byRule[k].value++;
        for (const c of v.controls || []) byRule[k].controls.add(c);
      }
    }
    tiles.push(['Denied requests', String(evs.length)]);
    series.push({key: 'denied', label: 'Denied', cls: 'deny'});
    parts.unshift(['rules', charts.bars('Denials by rule', `requests each rule denied in the ${w.label}`,
      Object.entries(byRule).sort((a, b) => b[1].value - a[1].value).slice(0, 20)
        .map(([label, r]) => ({label, value: r.value, detail: [...r.controls].join(', ')})))]);
  } else if (deniedRes && deniedRes.error) {
    parts.push(['denied-error', errorBox(deniedRes.error)]);
  } else {
    try {
      const resp = await fetch('/metrics', {credentials: 'omit', cache: 'no-store', redirect: 'error'});
      if (!resp.ok) throw new Error(`/metrics answered ${resp.status}`);
      const items = ruleHitsFromMetrics(await resp.text());
      parts.unshift(['rules', charts.bars('Denials by rule', 'since this gateway started (its /metrics; the audit trail, with the auditor role, has every gateway and any window)', items)]);
    } catch (e) {
      notes.push('Denials need the auditor or admin role.');
    }
  }
  if (series.length) {
    parts.unshift(['volume', charts.columns(series.length > 1 ? 'Runs and denials' : series[0].label, `per ${w.bucket >= 24 * 3600e3 ? 'day' : (w.bucket === 3600e3 ? 'hour' : '12 hours')}, ${w.label}`, buckets, series)]);
  }
  if (!ctx.isCurrent()) return null;
  fill(body,
    tiles.length ? section('At a glance', dl(tiles, 'tiles')) : null,
    notes.length ? h('ul', {class: 'notes'}, notes.map((n) => h('li', {class: 'muted'}, n))) : null,
    h('div', {class: 'charts'}, parts.map(([id, el]) => { el.dataset.chart = id; return el; })));
  return null;
}



// The run page: one run from request to removal. The run comes from GET
// /v1/runs/{id}; while it is not finished its log stream
// (/v1/runs/{id}/logs?follow=true) moves the state and the output along
// as they happen. Principals who may read the audit trail also see the
// decision's violations and the lifecycle events of the run's
// correlation ID; sections for usage, artifacts and receipts appear when
// the API provides them.

import * as api from '../api.js';
import {h, fill, table, dl, section, errorBox, json, announce} from '../dom.js';
import * as fmt from '../format.js';
import {badge, runStatus, auditLink, commandLine, violations, copyButton} from './common.js';

function outputSection(name, o, liveBytes) {
  const b = liveBytes || fmt.outputBytes(o);
  const pre = h('pre', {class: 'output', id: `out-${name}`, tabindex: '0', 'aria-label': `${name} of the run`});
  let mode = 'text';
  const draw = () => fill(pre, b.length === 0 ? h('span', {class: 'muted'}, '(empty)') : (mode === 'text' ? fmt.outputNodes(b) : fmt.hexdump(b)));
  const toggle = h('button', {type: 'button', class: 'secondary small', 'aria-pressed': 'false', 'aria-controls': pre.id}, 'Show as hex');
  toggle.addEventListener('click', () => {
    mode = mode === 'text' ? 'hex' : 'text';
    toggle.setAttribute('aria-pressed', String(mode === 'hex'));
    toggle.textContent = mode === 'hex' ? 'Show as text' : 'Show as hex';
    draw();
  });
  draw();
  const facts = o ? [
    `${fmt.bytes(o.bytes)} produced`,
    o.truncated ? `, truncated to ${fmt.bytes(b.length)} (the run's output limit)` : '',
    o.encoding === 'base64' ? ', not printable text: control characters and bytes that are not UTF-8 are shown escaped' : '',
  ].join('') : 'streaming…';
  return h('div', {class: 'stream'},
    h('h3', null, name, ' ', toggle),
    h('p', {class: 'muted'}, facts, o && o.sha256 ? h('span', {class: 'mono'}, ` · sha256 ${o.sha256}`) : null),
    pre);
}

// timelineRows turns the trail's events of a run into rows, oldest first.
function timelineRows(events) {
  return events.slice().sort((a, b) => (a.event_time < b.event_time ? -1 : a.event_time > b.event_time ? 1 : (a.seq || 0) - (b.seq || 0)));
}

function eventDetail(e) {
  const p = e.payload || {};
  const parts = [];
  if (e.exit_code !== undefined && e.exit_code !== null) parts.push(`exit code ${e.exit_code}`);
  if (p.image) parts.push(`image ${p.image}`);
  if (p.image_id) parts.push(String(p.image_id).slice(0, 19));
  if (p.error) parts.push(String(p.error));
  if (p.reason) parts.push(String(p.reason));
  if (e.container_id) parts.push(`container ${String(e.container_id).slice(0, 12)}`);
  return parts.join(' · ');
}

function usageSection(u) {
  const pairs = Object.entries(u).map(([k, v]) => [fmt.usageLabel(k), typeof v === 'number' && /bytes/.test(k) ? fmt.bytes(v) : (typeof v === 'number' && /_ms$/.test(k) ? fmt.duration(v) : (typeof v === 'object' ? JSON.stringify(v) : String(v)))]);
  return section('Resource usage', dl(pairs));
}

// egressSection shows what an egress run did through the proxy: totals,
// then its busiest destinations.
function egressSection(e) {
  const totals = dl([
    ['connections allowed', String(e.connections_allowed)],
    ['connections denied', String(e.connections_denied)],
    ['bytes sent', fmt.bytes(e.bytes_sent)],
    ['bytes received', fmt.bytes(e.bytes_received)],
  ]);
  return section('Egress', totals, table(null, [
    {label: 'Destination', cell: (d) => h('span', {class: 'mono'}, `${d.host}:${d.port}`)},
    {label: 'Allowed', cell: (d) => String(d.allowed), class: 'num'},
    {label: 'Denied', cell: (d) => String(d.denied), class: 'num'},
    {label: 'Sent', cell: (d) => fmt.bytes(d.bytes_sent), class: 'num'},
    {label: 'Received', cell: (d) => fmt.bytes(d.bytes_received), class: 'num'},
  ], e.destinations || [], {empty: 'The run opened no connections.'}));
}

function artifactList(body) {
  if (Array.isArray(body)) return body;
  for (const v of Object.values(body || {})) if (Array.isArray(v)) return v;
  return [];
}

async function artifactsSection(run, feats) {
  const sec = section('Artifacts', h('p', {class: 'muted'}, 'Loading…'));
  const tail = sec.lastChild;
  try {
    const body = await api.getJSON(api.fillPath(feats.artifacts, run.id));
    const items = artifactList(body);
    const dlBtn = (a) => {
      const p = a.path || a.name || '';
      if (!feats.artifactFile || !p) return '';
      const b = h('button', {type: 'button', class: 'secondary small'}, 'Download');
      b.addEventListener('click', () => api.download(api.fillPath(feats.artifactFile, run.id, p), null, p.split('/').pop() || 'artifact').catch((e) => sec.append(errorBox(e))));
      return b;
    };
    const parts = [table(null, [
      {label: 'Path', cell: (a) => h('span', {class: 'mono'}, a.path || a.name || '')},
      {label: 'Size', cell: (a) => fmt.bytes(a.bytes ?? a.size ?? a.size_bytes), class: 'num'},
      {label: 'SHA-256', cell: (a) => h('span', {class: 'mono clip'}, a.sha256 || '')},
      {label: '', cell: dlBtn},
    ], items, {empty: 'The run collected no artifacts.'})];
    if (feats.artifactsTar && items.length) {
      const b = h('button', {type: 'button', class: 'secondary'}, 'Download all (tar)');
      b.addEventListener('click', () => api.download(api.fillPath(feats.artifactsTar, run.id), null, `${run.id}-artifacts.tar`).catch((e) => sec.append(errorBox(e))));
      parts.push(h('p', null, b));
    }
    tail.replaceWith(...parts);
  } catch (e) {
    tail.replaceWith(errorBox(e));
  }
  return sec;
}

function receiptButton(run, feats, where) {
  const b = h('button', {type: 'button', class: 'secondary', id: 'receipt'}, 'Download receipt');
  b.addEventListener('click', async () => {
    const path = feats.receipt.includes('{') ? api.fillPath(feats.receipt, run.id) : feats.receipt;
    const params = feats.receipt.includes('{') ? null : {run_id: run.id};
    try {
      const got = await api.download(path, params, `receipt-${run.id}.json`);
      announce(`Receipt downloaded: ${got.name}`);
    } catch (e) { where.append(errorBox(e)); }
  });
  return b;
}

export async function render(view, ctx) {
  const id = ctx.id;
  const feats = ctx.features;
  const canAudit = api.hasRole('auditor', 'admin');
  const abort = new AbortController();
  let stopped = false;
  let pollTimer = null;
  const live = {stdout: new Uint8Array(0), stderr: new Uint8Array(0)};

  const stateSlot = h('span', {id: 'run-state', 'aria-live': 'polite'});
  const head = h('div', {class: 'runhead'});
  const outSlot = h('div', {id: 'run-output'});
  const rest = h('div');
  fill(view, h('h1', null, 'Run ', h('span', {class: 'mono', title: id}, fmt.shortID(id)), ' ', stateSlot),
    h('p', {class: 'runid'}, h('span', {class: 'muted'}, 'Run ID '), h('span', {class: 'mono', id: 'run-id'}, id), ' ', copyButton(id, 'run ID')), head, outSlot, rest);

  const drawHead = (r) => {
    fill(stateSlot, runStatus(r));
    stateSlot.dataset.state = r.state;
    stateSlot.dataset.outcome = r.outcome || '';
    const spec = r.spec || {};
    fill(head, section('Summary', dl([
      ['State', r.state],
      ['Outcome', r.outcome || '—'],
      ['Exit code', r.exit_code === null || r.exit_code === undefined ? '—' : String(r.exit_code)],
      ['OOM killed', r.oom_killed ? 'yes' : 'no'],
      ['Error', r.error ? `${r.error.code}: ${r.error.message}` : undefined],
      ['Principal', `${r.principal} (team ${r.team})`],
      ['Node', r.node || undefined],
      ['Image', h('span', {class: 'mono'}, spec.image || '')],
      ['Command', h('span', {class: 'mono'}, fmt.textNodes(commandLine(spec.command)))],
      ['Created', fmt.timeMs(r.created_at)],
      ['Started', fmt.timeMs(r.started_at)],
      ['Finished', fmt.timeMs(r.finished_at)],
      ['Duration', r.state === 'finished' ? fmt.duration(r.duration_ms) : '…'],
      ['Container', r.container_id ? h('span', {class: 'mono'}, r.container_id.slice(0, 12)) : '—'],
      ['Correlation ID', canAudit ? auditLink({correlation_id: r.correlation_id}, r.correlation_id) : h('span', {class: 'mono'}, r.correlation_id)],
      ['Decision', h('span', {class: 'mono'}, r.decision_id || '—')],
      ['Policy revision', h('span', {class: 'mono'}, r.policy_revision || '—')],
      ['Labels', spec.labels && Object.keys(spec.labels).length ? h('ul', {class: 'labels'}, Object.entries(spec.labels).map(([k, v]) => h('li', null, h('code', null, fmt.textNodes(k)), ' = ', h('code', null, fmt.textNodes(v))))) : undefined],
      ['Warnings', r.warnings && r.warnings.length ? h('ul', null, r.warnings.map((w) => h('li', null, fmt.textNodes(w)))) : undefined],
    ])));
  };

  const drawOutput = (r) => {
    fill(outSlot, section('Output',
      outputSection('stdout', r.state === 'finished' ? r.stdout : null, r.state === 'finished' ? null : live.stdout),
      outputSection('stderr', r.state === 'finished' ? r.stderr : null, r.state === 'finished' ? null : live.stderr)));
  };

  const drawRest = async (r) => {
    const parts = [];
    let events = null;
    if (canAudit && r.correlation_id) {
      try {
        const page = await api.getJSON('/v1/audit/events', {correlation_id: r.correlation_id, limit: 500});
        events = page.events || [];
      } catch (e) { parts.push(errorBox(e)); }
    }
    // The decision: its violations with their controls, from the trail.
    const decEv = events && events.find((e) => e.type === 'admission.allowed' || e.type === 'admission.denied');
    if (decEv) {
      const p = decEv.payload || {};
      parts.push(section('Decision',
        h('p', null, badge(p.allow ? 'allowed' : 'denied', p.allow ? 'ok' : 'bad'), ' by policy revision ', h('span', {class: 'mono'}, decEv.policy_revision || ''), ' · decision ', h('span', {class: 'mono'}, decEv.decision_id || '')),
        h('h3', null, 'Violations'), violations(p.violations, table, 'No rule denied this run.'),
        h('h3', null, 'Warnings'), violations(p.warnings, table, 'No warnings.'),
        (p.mutations || []).length ? [h('h3', null, 'Mutations'), table(null, [
          {label: 'Rule', cell: (m) => h('code', null, m.rule || '')}, {label: 'Path', cell: (m) => h('code', null, m.path || '')},
          {label: 'Value', cell: (m) => h('code', null, JSON.stringify(m.value))}], p.mutations)] : null));
    } else if (!canAudit) {
      parts.push(section('Decision', h('p', null, 'Allowed by policy revision ', h('span', {class: 'mono'}, r.policy_revision || '—'),
        '. The violations and controls of a decision are in the audit trail, which needs the auditor or admin role.')));
    }
    // The lifecycle: every event of the run in the trail, else the run's
    // own timestamps.
    if (events) {
      parts.push(section('Lifecycle', table(null, [
        {label: 'Time', cell: (e) => h('span', {class: 'mono'}, fmt.timeMs(e.event_time))},
        {label: 'Event', cell: (e) => h('code', null, e.type)},
        {label: 'Outcome', cell: (e) => e.outcome || ''},
        {label: 'Detail', cell: eventDetail},
      ], timelineRows(events), {class: 'timeline', empty: 'No events yet.'}),
      h('p', null, auditLink({correlation_id: r.correlation_id}, 'All audit events of this correlation ID'))));
    } else {
      parts.push(section('Lifecycle', table(null, [{label: 'Time', cell: (x) => h('span', {class: 'mono'}, fmt.timeMs(x[1]))}, {label: 'Step', cell: (x) => x[0]}],
        [['created', r.created_at], ['started', r.started_at], ['finished', r.finished_at]].filter((x) => x[1]), {class: 'timeline'})));
    }
    if (r.usage) parts.push(usageSection(r.usage));
    if (r.egress) parts.push(egressSection(r.egress));
    if (feats.artifacts && r.state === 'finished') parts.push(await artifactsSection(r, feats));
    const spec = section('Spec', h('p', {class: 'muted'}, 'The normalised spec as admitted; secrets are keyed hashes.'), json(r.spec));
    parts.push(spec);
    if (feats.receipt && r.state === 'finished') {
      const box = section('Receipt', h('p', null, 'A receipt proves offline that this run\'s events are in the trail.'));
      box.append(receiptButton(r, feats, box));
      parts.push(box);
    }
    if (!stopped) fill(rest, parts);
  };

  const finish = async () => {
    const r = await api.getJSON(`/v1/runs/${encodeURIComponent(id)}`);
    if (stopped) return;
    drawHead(r);
    drawOutput(r);
    await drawRest(r);
    announce(`Run ${r.state}${r.outcome ? `: ${r.outcome}` : ''}`);
  };

  const concat = (a, b) => { const c = new Uint8Array(a.length + b.length); c.set(a); c.set(b, a.length); return c; };

  let run = await api.getJSON(`/v1/runs/${encodeURIComponent(id)}`);
  drawHead(run);
  drawOutput(run);
  await drawRest(run);
  if (run.state !== 'finished') {
    let redraw = 0;
    const follow = async () => {
      try {
        await api.stream(`/v1/runs/${encodeURIComponent(id)}/logs`, {follow: 'true'}, (ev) => {
          if (ev.event === 'state') {
            const st = JSON.parse(ev.data);
            run = {...run, state: st.state, container_id: st.container_id || run.container_id};
            drawHead(run);
            announce(`Run ${st.state}`);
          } else if (ev.event === 'stdout' || ev.event === 'stderr') {
            live[ev.event] = concat(live[ev.event], fmt.outputBytes(JSON.parse(ev.data)));
            if (!redraw) redraw = requestAnimationFrame(() => { redraw = 0; if (!stopped && run.state !== 'finished') drawOutput(run); });
          }
        }, abort.signal);
      } catch (e) {
        if (stopped) return;
      }
      if (stopped) return;
      // The stream ends with the exit event (or a dropped connection):
      // the run as stored then is the final word; poll until it is.
      const check = async () => {
        pollTimer = null;
        try {
          const r = await api.getJSON(`/v1/runs/${encodeURIComponent(id)}`);
          if (stopped) return;
          if (r.state === 'finished') { await finish(); return; }
        } catch (e) { if (stopped) return; }
        pollTimer = setTimeout(check, 1000);
      };
      await check();
    };
    follow();
  }
  return () => { stopped = true; abort.abort(); if (pollTimer) clearTimeout(pollTimer); };
}

// The audit page: search the trail with the API's filters (GET
// /v1/audit/events, keyset paging), export what matches as JSONL or CSV
// (GET /v1/audit/export), check the chain and its signed checkpoints (GET
// /v1/audit/verify), and, when the API offers them, the latest
// checkpoint, the witnesses' status and a run's receipt.

import * as api from '../api.js';
import {h, fill, table, section, errorBox, json, announce} from '../dom.js';
import * as fmt from '../format.js';
import {badge, runLink} from './common.js';

const FILTERS = [
  ['correlation_id', 'Correlation ID'], ['run_id', 'Run ID'], ['decision_id', 'Decision ID'], ['type', 'Type'],
  ['actor', 'Actor'], ['team', 'Team'], ['outcome', 'Outcome'], ['since', 'Since'], ['until', 'Until'],
];
const PAGE = 100;

function filterForm(f, types, ctx) {
  const input = ([k, label]) => {
    let el;
    if (k === 'type') {
      el = h('select', {id: `a-${k}`, name: k}, h('option', {value: ''}, 'any'), types.map((t) => h('option', {value: t, selected: t === f[k]}, t)));
    } else if (k === 'since' || k === 'until') {
      el = h('input', {id: `a-${k}`, name: k, type: 'datetime-local', value: f[k]});
    } else {
      el = h('input', {id: `a-${k}`, name: k, value: f[k], autocomplete: 'off', spellcheck: 'false'});
    }
    return h('div', {class: 'field'}, h('label', {for: `a-${k}`}, label), el);
  };
  const form = h('form', {class: 'filters', 'aria-label': 'Search the audit trail'}, FILTERS.map(input),
    h('div', {class: 'field actions'}, h('button', {type: 'submit'}, 'Search'), h('button', {type: 'button', class: 'secondary', id: 'a-clear'}, 'Clear')));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const params = {};
    for (const [k] of FILTERS) params[k] = form.elements[k].value.trim();
    ctx.go('audit', params);
  });
  form.querySelector('#a-clear').addEventListener('click', () => ctx.go('audit', {}));
  return form;
}

function apiFilters(f) {
  const q = {};
  for (const [k] of FILTERS) q[k] = (k === 'since' || k === 'until') ? fmt.toRFC3339(f[k]) : f[k];
  return q;
}

function eventsTable(events, canOpenRuns) {
  const rows = [];
  for (const e of events) rows.push(e);
  const tbl = table('Matching events, oldest first', [
    {label: 'Time', cell: (e) => h('span', {class: 'mono'}, fmt.timeMs(e.event_time))},
    {label: 'Type', cell: (e) => h('code', null, e.type)},
    {label: 'Outcome', cell: (e) => e.outcome || ''},
    {label: 'Actor', cell: (e) => e.actor || ''},
    {label: 'Team', cell: (e) => e.team || ''},
    {label: 'Run', cell: (e) => (e.run_id ? (canOpenRuns ? runLink(e.run_id, fmt.shortID(e.run_id)) : h('span', {class: 'mono'}, fmt.shortID(e.run_id))) : '')},
    {label: 'Correlation', cell: (e) => (e.correlation_id ? h('a', {href: `#/audit?${new URLSearchParams({correlation_id: e.correlation_id})}`, class: 'mono'}, e.correlation_id.length > 16 ? `${e.correlation_id.slice(0, 16)}…` : e.correlation_id) : '')},
    {label: 'Chain · seq', cell: (e) => h('span', {class: 'mono'}, `${String(e.chain_id || '').slice(0, 8)} · ${e.seq}`)},
    {label: 'Details', cell: (e) => {
      const d = h('details', null, h('summary', null, 'Event'), json(e));
      return d;
    }},
  ], rows, {hideCaption: true, empty: 'No events match.', class: 'events'});
  return tbl;
}

function verifySection() {
  const out = h('div', {id: 'verify-result', 'aria-live': 'polite'}, h('p', {class: 'muted'}, 'Not checked yet in this visit.'));
  const b = h('button', {type: 'button', id: 'verify'}, 'Verify the trail');
  b.addEventListener('click', async () => {
    b.disabled = true;
    fill(out, h('p', {class: 'muted'}, 'Verifying every chain, hash and checkpoint signature…'));
    const started = Date.now();
    try {
      const rep = await api.getJSON('/v1/audit/verify');
      const problems = rep.problems || [];
      fill(out,
        h('p', {class: rep.ok ? 'ok-text' : 'error-text'}, badge(rep.ok ? 'verified' : 'problems', rep.ok ? 'ok' : 'bad'),
          ` ${rep.checked} events checked at ${fmt.time(new Date().toISOString())} in ${fmt.duration(Date.now() - started)}; `,
          rep.ok ? 'every hash links and every checkpoint signature holds.' : `${problems.length} problem(s).`),
        problems.length ? table('Problems', [
          {label: 'Kind', cell: (p) => h('code', null, p.kind)},
          {label: 'Chain', cell: (p) => h('span', {class: 'mono'}, p.chain_id || '')},
          {label: 'Seq', cell: (p) => String(p.seq), class: 'num'},
          {label: 'Detail', cell: (p) => p.detail},
        ], problems) : null);
      announce(rep.ok ? 'The trail verifies' : 'The trail has problems');
    } catch (e) {
      fill(out, errorBox(e));
    } finally {
      b.disabled = false;
    }
  });
  return section('Integrity', h('p', {class: 'help'}, 'Checks the hash chains and the signed checkpoints, as sandgate audit verify does. Problems of kind unsigned_tail or unsigned_chain mean events not yet covered by a checkpoint.'), h('p', null, b), out);
}

async function textOrJSON(path) {
  const resp = await api.request('GET', path, {accept: 'application/json, text/plain;q=0.9'});
  const ct = resp.headers.get('Content-Type') || '';
  return ct.includes('json') ? json(await resp.json()) : h('pre', {class: 'json'}, await resp.text());
}

async function optionalSection(title, help, path) {
  const body = h('div', null, h('p', {class: 'muted'}, 'Loading…'));
  const sec = section(title, h('p', {class: 'help'}, help), body);
  try { fill(body, await textOrJSON(path)); } catch (e) { fill(body, errorBox(e)); }
  return sec;
}

function receiptSection(path) {
  const out = h('div', {'aria-live': 'polite'});
  const input = h('input', {id: 'receipt-run', name: 'run', autocomplete: 'off', spellcheck: 'false'});
  const form = h('form', {'aria-label': 'Download a run receipt'}, h('div', {class: 'field'}, h('label', {for: 'receipt-run'}, 'Run ID'), input),
    h('p', null, h('button', {type: 'submit'}, 'Download receipt')), out);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const id = input.value.trim();
    if (!id) return;
    try {
      const got = path.includes('{') ? await api.download(api.fillPath(path, id), null, `receipt-${id}.json`) : await api.download(path, {run_id: id}, `receipt-${id}.json`);
      fill(out, h('p', null, `Downloaded ${got.name} (${fmt.bytes(got.size)}). Check it offline with sandgate audit verify-receipt.`));
    } catch (e) { fill(out, errorBox(e)); }
  });
  return section('Receipt for a run', form);
}

export async function render(view, ctx) {
  const f = {};
  for (const [k] of FILTERS) f[k] = ctx.params.get(k) || '';
  const types = ctx.features.eventTypes;
  const canOpenRuns = api.hasRole('submitter', 'auditor', 'admin');
  const results = h('div', {id: 'audit-events'}, h('p', {class: 'muted'}, 'Loading…'));
  const more = h('button', {type: 'button', class: 'secondary', hidden: true}, 'Next page');
  const exportMsg = h('span', {id: 'export-result', 'aria-live': 'polite', class: 'muted'});
  const exportBtn = (format) => {
    const b = h('button', {type: 'button', class: 'secondary', id: `export-${format}`}, `Export ${format.toUpperCase()}`);
    b.addEventListener('click', async () => {
      exportMsg.textContent = 'Exporting…';
      try {
        const got = await api.download('/v1/audit/export', {...apiFilters(f), format}, `sandgate-audit.${format}`);
        exportMsg.textContent = `Downloaded ${got.name} (${fmt.bytes(got.size)}); the export is itself recorded as audit.exported.`;
      } catch (e) { exportMsg.textContent = `${e.code || 'Error'}: ${e.message}`; }
    });
    return b;
  };
  const parts = [
    h('h1', null, 'Audit'),
    filterForm(f, types, ctx),
    section('Events', h('p', {class: 'toolbar'}, exportBtn('jsonl'), ' ', exportBtn('csv'), ' ', exportMsg), results, more),
    verifySection(),
  ];
  fill(view, parts);
  const feats = ctx.features;
  if (feats.checkpoint) view.append(await optionalSection('Latest checkpoint', 'The newest signed checkpoint of the trail (a signed note).', feats.checkpoint));
  if (feats.witness) view.append(await optionalSection('Witnesses', 'Which witnesses cosigned which checkpoint.', feats.witness));
  if (feats.receipt) view.append(receiptSection(feats.receipt));

  let events = [];
  let cursor = null;
  const load = async () => {
    const q = {...apiFilters(f), limit: PAGE};
    if (cursor) q.cursor = cursor;
    const page = await api.getJSON('/v1/audit/events', q);
    events = events.concat(page.events || []);
    cursor = page.next_cursor;
    more.hidden = !cursor;
    fill(results, h('p', {class: 'muted'}, `${events.length} event(s)${cursor ? ', more on the next page' : ''}.`), eventsTable(events, canOpenRuns));
  };
  more.addEventListener('click', () => load().catch((e) => results.append(errorBox(e))));
  try { await load(); } catch (e) { fill(results, errorBox(e)); }
  return null;
}



// The audit page: at the top each chain's state (chains.js); then the
// trail newest first with the API's filters as removable chips (GET
// /v1/audit/events?order=newest, keyset paging), one line per event
// (events.js); export what matches as JSONL or CSV (GET
// /v1/audit/export); and a run's receipt when the API offers it.

import * as api from '../api.js';
import {h, fill, table, section, errorBox, json} from '../dom.js';
import * as fmt from '../format.js';
import {chainsSection} from './chains.js';
import {describe, rulesOf} from './events.js';

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

// chips shows the filters in force, each a button that removes it.
function chips(f, ctx) {
  const active = FILTERS.filter(([k]) => f[k]);
  if (!active.length) return h('p', {class: 'muted', id: 'a-chips'}, 'No filter: every event, newest first.');
  return h('ul', {class: 'chips', id: 'a-chips', 'aria-label': 'Filters in force'}, active.map(([k, label]) => {
    const b = h('button', {type: 'button', class: 'secondary', 'aria-label': `Remove the filter ${label} ${f[k]}`, dataset: {filter: k}}, `${label}: `, fmt.textNodes(f[k]), ' \u2715');
    b.addEventListener('click', () => ctx.go('audit', {...f, [k]: ''}));
    return h('li', null, b);
  }));
}

// eventsTable shows one line per event, newest first, the rules of a
// denial in their own column, and each event's record behind a toggle.
function eventsTable(events, canOpenRuns, raw) {
  return table('Matching events, newest first', [
    {label: 'Time (UTC)', cell: (e) => h('span', {class: 'mono', title: e.event_time}, fmt.time(e.event_time))},
    {label: 'What happened', class: 'what', cell: (e) => describe(e, canOpenRuns)},
    {label: 'Rule', cell: (e) => rulesOf(e).map((r, i) => [i ? ', ' : '', h('code', null, r)])},
    {label: 'Record', class: 'raw', cell: (e) => h('details', {open: raw}, h('summary', null, 'Raw JSON'), json(e))},
  ], events, {hideCaption: true, empty: 'No events match.', class: 'events', rowAttrs: (e) => ({dataset: {type: e.type, seq: e.seq, recorded: e.recorded_at}})});
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
  const more = h('button', {type: 'button', class: 'secondary', hidden: true, id: 'a-more'}, 'Older events');
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
  let raw = false;
  const rawToggle = h('button', {type: 'button', class: 'secondary', id: 'a-raw', 'aria-pressed': 'false'}, 'Show raw JSON');
  const parts = [
    h('h1', null, 'Audit'),
    chainsSection(),
    filterForm(f, types, ctx),
    section('Events', chips(f, ctx), h('p', {class: 'toolbar'}, exportBtn('jsonl'), ' ', exportBtn('csv'), ' ', rawToggle, ' ', exportMsg), results, more),
  ];
  fill(view, parts);
  const feats = ctx.features;
  if (feats.receipt) view.append(receiptSection(feats.receipt));

  let events = [];
  let cursor = null;
  const load = async () => {
    const q = {...apiFilters(f), limit: PAGE, order: 'newest'};
    if (cursor) q.cursor = cursor;
    const page = await api.getJSON('/v1/audit/events', q);
    events = events.concat(page.events || []);
    cursor = page.next_cursor;
    more.hidden = !cursor;
    draw();
  };
  const draw = () => fill(results, h('p', {class: 'muted'}, `${events.length} event(s), newest first${cursor ? '; older ones on the next page' : ''}.`), eventsTable(events, canOpenRuns, raw));
  rawToggle.addEventListener('click', () => {
    raw = !raw;
    rawToggle.setAttribute('aria-pressed', String(raw));
    rawToggle.textContent = raw ? 'Hide raw JSON' : 'Show raw JSON';
    draw();
  });
  more.addEventListener('click', () => load().catch((e) => results.append(errorBox(e))));
  try { await load(); } catch (e) { fill(results, errorBox(e)); }
  return null;
}



// The runs page: a live list with filters. State, outcome and time go to
// the API (GET /v1/runs); team and image, which the API does not filter
// on, are applied to each page it answers.

import * as api from '../api.js';
import {h, fill, table, errorBox, announce} from '../dom.js';
import * as fmt from '../format.js';
import {runStatus, commandLine, keepFocus} from './common.js';

const POLL_MS = 2000;
const PAGE = 200;

function field(id, label, input) {
  return h('div', {class: 'field'}, h('label', {for: id}, label), input);
}

function select(id, value, options) {
  return h('select', {id, name: id}, options.map(([v, l]) => h('option', {value: v, selected: v === value}, l)));
}

export async function render(view, ctx) {
  const p = ctx.params;
  const f = {
    team: p.get('team') || '', image: p.get('image') || '', outcome: p.get('outcome') || '',
    state: p.get('state') || '', since: p.get('since') || '', until: p.get('until') || '',
  };
  const outcomes = ctx.features.outcomes.length ? ctx.features.outcomes : ['succeeded', 'failed', 'oom_killed', 'timed_out', 'cancelled', 'error', 'lost'];
  const form = h('form', {class: 'filters', 'aria-label': 'Filter runs'},
    field('f-team', 'Team', h('input', {id: 'f-team', name: 'team', value: f.team, autocomplete: 'off'})),
    field('f-outcome', 'Outcome', select('f-outcome', f.outcome, [['', 'any'], ...outcomes.map((o) => [o, o])])),
    field('f-state', 'State', select('f-state', f.state, [['', 'any'], ...['pending', 'creating', 'running', 'finished'].map((o) => [o, o])])),
    field('f-image', 'Image contains', h('input', {id: 'f-image', name: 'image', value: f.image, autocomplete: 'off'})),
    field('f-since', 'Created after', h('input', {id: 'f-since', name: 'since', type: 'datetime-local', value: f.since})),
    field('f-until', 'Created before', h('input', {id: 'f-until', name: 'until', type: 'datetime-local', value: f.until})),
    h('div', {class: 'field actions'}, h('button', {type: 'submit'}, 'Apply'), h('button', {type: 'button', class: 'secondary', id: 'f-clear'}, 'Clear')));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const v = (n) => form.elements[n].value.trim();
    ctx.go('runs', {team: v('team'), outcome: v('f-outcome'), state: v('f-state'), image: v('image'), since: v('since'), until: v('until')});
  });
  form.querySelector('#f-clear').addEventListener('click', () => ctx.go('runs', {}));

  const live = h('button', {type: 'button', class: 'secondary', 'aria-pressed': 'true', id: 'live-toggle'}, 'Pause live updates');
  const stamp = h('span', {class: 'muted', id: 'live-stamp'});
  const list = h('div', {id: 'runs-list'});
  const more = h('button', {type: 'button', class: 'secondary', hidden: true}, 'Load older runs');
  const clientSide = f.team || f.image;
  fill(view,
    h('h1', null, 'Runs'),
    form,
    h('p', {class: 'toolbar'}, live, ' ', stamp,
      clientSide ? h('span', {class: 'muted'}, ' · team and image are matched within each page the API answers') : null),
    list, more);

  const query = () => ({state: f.state, outcome: f.outcome, since: fmt.toRFC3339(f.since), until: fmt.toRFC3339(f.until), limit: PAGE});
  const keep = (r) => (!f.team || r.team === f.team) && (!f.image || String((r.spec && r.spec.image) || '').includes(f.image));
  let rows = [];
  let cursor = null;
  let extraPages = false;
  let paused = false;
  let timer = null;
  let stopped = false;

  const draw = () => keepFocus(list, () => fill(list, table('Runs, newest first', [
    {label: 'Run', cell: (r) => h('a', {href: `#/runs/${encodeURIComponent(r.id)}`, class: 'mono', title: r.id, dataset: {key: `run-${r.id}`}}, fmt.shortID(r.id))},
    {label: 'Status', cell: (r) => runStatus(r)},
    {label: 'Exit', cell: (r) => (r.exit_code === null || r.exit_code === undefined ? '—' : String(r.exit_code)), class: 'num'},
    {label: 'Team', cell: (r) => r.team},
    {label: 'Principal', cell: (r) => r.principal, class: 'wide'},
    {label: 'Image', cell: (r) => h('span', {class: 'mono'}, fmt.textNodes((r.spec && r.spec.image) || ''))},
    {label: 'Command', cell: (r) => h('span', {class: 'mono clip'}, fmt.textNodes(commandLine(r.spec && r.spec.command)))},
    {label: 'Created', cell: (r) => fmt.time(r.created_at), class: 'wide'},
    {label: 'Duration', cell: (r) => (r.state === 'finished' ? fmt.duration(r.duration_ms) : '…'), class: 'num'},
    {label: 'Output', cell: (r) => fmt.bytes((r.stdout ? r.stdout.bytes : 0) + (r.stderr ? r.stderr.bytes : 0)), class: 'num wide'},
  ], rows, {hideCaption: true, empty: 'No runs match.', rowAttrs: (r) => ({dataset: {run: r.id, state: r.state}})})));

  const load = async (append) => {
    const q = query();
    if (append && cursor) q.cursor = cursor;
    const page = await api.getJSON('/v1/runs', q);
    const got = (page.runs || []).filter(keep);
    rows = append ? rows.concat(got) : got;
    cursor = page.next_cursor;
    more.hidden = !cursor;
    draw();
    stamp.textContent = `Updated ${fmt.time(new Date().toISOString())}`;
  };

  const tick = async () => {
    timer = null;
    if (stopped) return;
    if (!paused && !extraPages && document.visibilityState === 'visible') {
      try { await load(false); } catch (e) { if (!stopped) fill(list, errorBox(e)); }
    }
    if (!stopped) timer = setTimeout(tick, POLL_MS);
  };

  live.addEventListener('click', () => {
    paused = !paused;
    live.setAttribute('aria-pressed', String(!paused));
    live.textContent = paused ? 'Resume live updates' : 'Pause live updates';
    announce(paused ? 'Live updates paused' : 'Live updates resumed');
  });
  more.addEventListener('click', async () => {
    extraPages = true;
    try { await load(true); } catch (e) { list.append(errorBox(e)); }
  });

  await load(false);
  timer = setTimeout(tick, POLL_MS);
  return () => { stopped = true; if (timer) clearTimeout(timer); };
}



// The sessions page: a live list of sessions (GET /v1/sessions), and a
// session's own page (#/sessions/<id>): its summary (GET
// /v1/sessions/{id}), its commands as runs (GET /v1/runs?session_id=),
// its workspace to download (GET /v1/sessions/{id}/files), its file
// copies and egress from the trail, and the parts the API does not serve
// yet (terminal recordings, secrets use) named as such, so that a gateway
// that adds them only needs a section here.

import * as api from '../api.js';
import {h, fill, table, dl, section, errorBox, announce} from '../dom.js';
import * as fmt from '../format.js';
import {badge, runLink, runStatus, commandLine, keepFocus, copyButton} from './common.js';
import {describe} from './events.js';

const POLL_MS = 2000;

function sessionState(s) {
  if (s.state !== 'ended') return badge(s.state, 'live');
  return badge(s.end_reason ? `ended: ${s.end_reason}` : 'ended', s.error ? 'bad' : 'none');
}

function sessionLink(s) {
  return h('a', {href: `#/sessions/${encodeURIComponent(s.id)}`, class: 'mono', title: s.id, dataset: {key: `session-${s.id}`}}, fmt.shortID(s.id));
}

// liveList polls load every POLL_MS while the tab is visible and not
// paused; it returns the page's cleanup.
function liveList(button, load) {
  let paused = false;
  let stopped = false;
  let timer = null;
  const tick = async () => {
    timer = null;
    if (stopped) return;
    if (!paused && document.visibilityState === 'visible') await load();
    if (!stopped) timer = setTimeout(tick, POLL_MS);
  };
  button.addEventListener('click', () => {
    paused = !paused;
    button.setAttribute('aria-pressed', String(!paused));
    button.textContent = paused ? 'Resume live updates' : 'Pause live updates';
    announce(paused ? 'Live updates paused' : 'Live updates resumed');
  });
  timer = setTimeout(tick, POLL_MS);
  return () => { stopped = true; if (timer) clearTimeout(timer); };
}

export async function renderList(view) {
  const list = h('div', {id: 'sessions-list'}, h('p', {class: 'muted'}, 'Loading…'));
  const live = h('button', {type: 'button', class: 'secondary', 'aria-pressed': 'true', id: 'live-toggle'}, 'Pause live updates');
  const stamp = h('span', {class: 'muted'});
  fill(view, h('h1', null, 'Sessions'), h('p', {class: 'toolbar'}, live, ' ', stamp), list);
  const load = async () => {
    try {
      const page = await api.getJSON('/v1/sessions', {limit: 200});
      keepFocus(list, () => fill(list, table('Sessions, newest first', [
        {label: 'Session', cell: sessionLink},
        {label: 'State', cell: sessionState},
        {label: 'Who', cell: (s) => `${s.principal} (${s.team})`},
        {label: 'Image', cell: (s) => h('span', {class: 'mono'}, fmt.textNodes((s.spec && s.spec.image) || ''))},
        {label: 'Commands', cell: (s) => String(s.runs || 0), class: 'num'},
        {label: 'Last active', cell: (s) => fmt.time(s.last_active_at)},
      ], page.sessions || [], {hideCaption: true, empty: 'No sessions.'})));
      stamp.textContent = `Updated ${fmt.time(new Date().toISOString())}`;
    } catch (e) { fill(list, errorBox(e)); }
  };
  await load();
  return liveList(live, load);
}

function summary(s) {
  const spec = s.spec || {};
  const limits = s.limits || {};
  return section('Summary', dl([
    ['State', sessionState(s)],
    ['Error', s.error ? `${s.error.code}: ${s.error.message}` : undefined],
    ['Principal', `${s.principal} (team ${s.team})`],
    ['Node', s.node || undefined],
    ['Image', h('span', {class: 'mono'}, fmt.textNodes(spec.image || ''))],
    ['Commands run', String(s.runs || 0)],
    ['Created', fmt.time(s.created_at)],
    ['Last active', fmt.time(s.last_active_at)],
    ['Ended', s.ended_at ? fmt.time(s.ended_at) : undefined],
    ['Limits', Object.entries(limits).map(([k, v]) => `${k.replace(/_/g, ' ')} ${v}`).join(' · ') || undefined],
    ['Correlation ID', h('span', {class: 'mono'}, s.correlation_id)],
  ]));
}

function commands(runs) {
  return section('Commands', table('Commands, newest first', [
    {label: 'Run', cell: (r) => runLink(r.id)},
    {label: 'Status', cell: runStatus},
    {label: 'Exit', cell: (r) => (r.exit_code === null || r.exit_code === undefined ? '—' : String(r.exit_code)), class: 'num'},
    {label: 'Command', cell: (r) => h('span', {class: 'mono'}, fmt.textNodes(commandLine(r.spec && r.spec.command)))},
    {label: 'Created', cell: (r) => fmt.time(r.created_at)},
  ], runs, {hideCaption: true, empty: 'No command has run in this session yet.'}));
}

function filesSection(s, events) {
  const b = h('button', {type: 'button', class: 'secondary', id: 'session-workspace'}, 'Download the workspace (tar)');
  const msg = h('span', {class: 'muted', 'aria-live': 'polite'});
  b.addEventListener('click', async () => {
    try {
      const got = await api.download(`/v1/sessions/${encodeURIComponent(s.id)}/files`, null, `${s.id}-workspace.tar`);
      msg.textContent = `Downloaded ${got.name} (${fmt.bytes(got.size)}).`;
    } catch (e) { msg.textContent = `${e.code || 'Error'}: ${e.message}`; }
  });
  const copies = events ? table('File copies', [
    {label: 'Time (UTC)', cell: (e) => h('span', {class: 'mono'}, fmt.time(e.event_time))},
    {label: 'What happened', cell: (e) => describe(e, true)},
    {label: 'Size', cell: (e) => fmt.bytes(e.payload && e.payload.size), class: 'num'},
  ], events.filter((e) => e.type === 'session.file_put' || e.type === 'session.file_get'), {hideCaption: true, empty: 'No file was copied in or out.'})
    : h('p', {class: 'muted'}, 'The copies in and out are in the audit trail, which needs the auditor or admin role.');
  return section('Files', s.state === 'ended' ? null : h('p', {class: 'toolbar'}, b, ' ', msg), copies);
}

function egressSection(s) {
  const e = s.egress;
  if (!e) return section('Egress', h('p', {class: 'muted'}, s.spec && s.spec.network === 'egress' ? 'Counted when the session ends.' : 'The session has no network.'));
  return section('Egress', dl([
    ['connections allowed', String(e.connections_allowed)], ['connections denied', String(e.connections_denied)],
    ['bytes sent', fmt.bytes(e.bytes_sent)], ['bytes received', fmt.bytes(e.bytes_received)],
  ]));
}

// previewSection opens a port of the session in the browser: a page a
// person navigates to cannot carry a bearer header, so the console asks
// the gateway for a short-lived link to the port (POST
// /v1/sessions/{id}/previews, decided by the policy and recorded), and
// shows it to open in a new tab. The link is a credential: it is shown,
// never stored.
function previewSection(s) {
  const port = h('input', {id: 'preview-port', type: 'number', min: '1', max: '65535', inputmode: 'numeric', value: '8080'});
  const out = h('div', {id: 'preview-result', 'aria-live': 'polite'});
  const b = h('button', {type: 'button', id: 'preview-open'}, 'Make a preview link');
  b.addEventListener('click', async () => {
    fill(out);
    b.disabled = true;
    try {
      const link = await api.postJSON(`/v1/sessions/${encodeURIComponent(s.id)}/previews`, {port: Number(port.value)});
      fill(out, h('p', null, h('a', {href: link.url, target: '_blank', rel: 'noopener noreferrer', id: 'preview-link'}, `Open port ${link.port}`),
        h('span', {class: 'muted'}, ` — the link works until ${fmt.time(link.expires_at)}, for you alone; do not share it.`)));
    } catch (e) {
      fill(out, errorBox(e));
    } finally {
      b.disabled = false;
    }
  });
  return section('Port previews',
    h('p', {class: 'help'}, 'A port the session serves, reached through the gateway: the policy decides which ports, and every connection is recorded.'),
    h('div', {class: 'filters'}, h('div', {class: 'field'}, h('label', {for: 'preview-port'}, 'Port'), port), h('div', {class: 'field actions'}, b)),
    out);
}

// notYet names a part of a session the gateway's API does not serve yet.
function notYet(title, what) {
  return section(title, h('p', {class: 'muted'}, `This gateway's API does not serve ${what} yet.`));
}

export async function renderOne(view, ctx) {
  const id = ctx.id;
  const canAudit = api.hasRole('auditor', 'admin');
  const s = await api.getJSON(`/v1/sessions/${encodeURIComponent(id)}`);
  const [runs, events] = await Promise.all([
    api.getJSON('/v1/runs', {session_id: id, limit: 200}).then((p) => p.runs || []),
    canAudit ? api.getJSON('/v1/audit/events', {correlation_id: s.correlation_id, limit: 1000}).then((p) => p.events || []) : null,
  ]);
  fill(view,
    h('h1', null, 'Session ', h('span', {class: 'mono', title: id}, fmt.shortID(id))),
    h('p', {class: 'runid'}, h('span', {class: 'muted'}, 'Session ID '), h('span', {class: 'mono'}, id), ' ', copyButton(id, 'session ID')),
    summary(s), commands(runs), filesSection(s, events), egressSection(s),
    ctx.features && ctx.features.previews && s.state === 'open' && api.hasRole('submitter') ? previewSection(s) : null,
    notYet('Terminal recordings', 'terminal recordings'),
    notYet('Secrets use', 'which secrets a session used'));
  return null;
}

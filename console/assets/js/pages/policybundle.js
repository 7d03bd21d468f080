// policybundle.js holds the policies page's views of a bundle: the rules
// of the policy in force (GET /v1/policies' rules), its load history (the
// trail's policy.loaded and policy.load_failed events), and the replay
// of a candidate bundle uploaded as a .tar.gz or chosen as a directory
// (POST /v1/policies/replay), with its newly denied, newly allowed and
// changed decisions as tables by rule, with examples.

import * as api from '../api.js';
import {h, fill, table, section, errorBox, announce} from '../dom.js';
import * as fmt from '../format.js';
import {badge, runLink} from './common.js';

const SEVERITY_ORDER = {critical: 0, high: 1, medium: 2, low: 3};

// rulesSection lists the rules: the most severe first, then by rule.
export function rulesSection(rules) {
  const sorted = (rules || []).slice().sort((a, b) => ((SEVERITY_ORDER[a.severity] ?? 9) - (SEVERITY_ORDER[b.severity] ?? 9)) || a.rule.localeCompare(b.rule));
  return section('Rules', h('p', {class: 'help'}, 'Each rule of the policy in force as its METADATA describes it; tests counts the bundle\u2019s unit tests that name the rule.'),
    table('Rules of the policy in force', [
      {label: 'Rule', cell: (r) => [h('code', null, r.rule), h('div', {class: 'muted'}, r.title)]},
      {label: 'Severity', cell: (r) => (r.kind === 'mutation' ? 'mutation' : badge(r.severity, r.severity === 'critical' || r.severity === 'high' ? 'bad' : 'warn'))},
      {label: 'Controls', cell: (r) => (r.controls || []).join(', ') || '—'},
      {label: 'Tests', cell: (r) => String(r.tests), class: 'num'},
      {label: 'Where', cell: (r) => h('span', {class: 'mono'}, `${r.module}:${r.line}`)},
    ], sorted, {hideCaption: true, class: 'rules', empty: 'The policy in force describes no rule.'}));
}

// historySection reads the trail's policy loads, newest first.
export async function historySection() {
  if (!api.hasRole('auditor', 'admin')) {
    return section('Load history', h('p', {class: 'muted'}, 'The loads are in the audit trail, which needs the auditor or admin role.'));
  }
  const rows = [];
  for (const type of ['policy.loaded', 'policy.load_failed']) {
    const page = await api.getJSON('/v1/audit/events', {type, order: 'newest', limit: 50});
    rows.push(...(page.events || []));
  }
  rows.sort((a, b) => (a.recorded_at < b.recorded_at ? 1 : -1));
  return section('Load history', table('Policy loads, newest first', [
    {label: 'Time (UTC)', cell: (e) => h('span', {class: 'mono'}, fmt.time(e.event_time))},
    {label: 'Result', cell: (e) => (e.type === 'policy.loaded' ? badge('loaded', 'ok') : badge('refused', 'bad'))},
    {label: 'Revision', cell: (e) => h('span', {class: 'mono', title: e.policy_revision || ''}, String(e.policy_revision || (e.payload && e.payload.revision) || '—').slice(0, 19))},
    {label: 'Detail', cell: (e) => {
      const p = e.payload || {};
      const errs = p.errors || (p.error ? [p.error] : []);
      return errs.length ? h('span', {class: 'error-text'}, fmt.textNodes(errs.map(String).join('; '))) : (p.source ? fmt.textNodes(String(p.source)) : '');
    }},
  ], rows.slice(0, 50), {hideCaption: true, class: 'loads', empty: 'The trail records no load.'}));
}

// bundleFile says whether a path of a chosen directory or an archive is a
// file of the bundle's top (*.rego, *.json), and its name there.
function bundleName(path) {
  const parts = path.replace(/^\.\//, '').split('/').filter(Boolean);
  const name = parts.length > 1 ? parts.slice(1).join('/') : parts[0] || '';
  return !name.includes('/') && /\.(rego|json)$/.test(name) ? name : null;
}

// untar reads a tar archive's regular files as {path: bytes} (ustar, with
// pax and GNU long names).
export function untar(buf) {
  const out = {};
  const dec = new TextDecoder();
  const str = (off, len) => dec.decode(buf.subarray(off, off + len)).replace(/\0.*$/s, '');
  let off = 0;
  let longName = null;
  while (off + 512 <= buf.length) {
    if (buf.subarray(off, off + 512).every((x) => x === 0)) break;
    const size = parseInt(str(off + 124, 12).trim() || '0', 8);
    const type = String.fromCharCode(buf[off + 156] || 48);
    const prefix = str(off + 345, 155);
    let name = longName || (prefix ? `${prefix}/${str(off, 100)}` : str(off, 100));
    longName = null;
    const data = buf.subarray(off + 512, off + 512 + size);
    if (type === 'L') longName = dec.decode(data).replace(/\0.*$/s, '');
    else if (type === 'x') {
      const m = /\d+ path=([^\n]*)\n/.exec(dec.decode(data));
      if (m) longName = m[1];
    } else if (type === '0' || type === '\0') out[name] = data;
    off += 512 + Math.ceil(size / 512) * 512;
    name = null;
  }
  return out;
}

async function filesOfArchive(file) {
  const stream = file.stream().pipeThrough(new DecompressionStream('gzip'));
  const buf = new Uint8Array(await new Response(stream).arrayBuffer());
  const files = {};
  for (const [path, data] of Object.entries(untar(buf))) {
    const name = bundleName(path.includes('/') ? path : `top/${path}`);
    if (name) files[name] = new TextDecoder('utf-8', {fatal: true}).decode(data);
  }
  return files;
}

async function filesOfDirectory(list) {
  const files = {};
  for (const f of list) {
    const name = bundleName(f.webkitRelativePath || f.name);
    if (name) files[name] = await f.text();
  }
  return files;
}

function changesTable(title, ch, id) {
  const rows = [];
  for (const g of (ch && ch.rules) || []) for (const ex of g.examples || []) rows.push({g, ex});
  return [h('h3', {id}, `${title}: ${(ch && ch.count) || 0}`),
    table(title, [
      {label: 'Rule', cell: ({g}) => [h('code', null, g.rule), ` ${g.change} · ${g.count}`]},
      {label: 'Example', cell: ({ex}) => [ex.run_id ? runLink(ex.run_id) : h('span', {class: 'mono', title: ex.decision_id}, fmt.shortID(ex.decision_id)),
        ` ${ex.operation} by ${ex.principal} (${ex.team}), ${fmt.time(ex.recorded_at)}`]},
      {label: 'Recorded', cell: ({ex}) => [badge(ex.recorded_allow ? 'allowed' : 'denied', ex.recorded_allow ? 'ok' : 'bad'), ' ', (ex.recorded_rules || []).join(', ')]},
      {label: 'Candidate', cell: ({ex}) => [badge(ex.candidate_allow ? 'allowed' : 'denied', ex.candidate_allow ? 'ok' : 'bad'), ' ', (ex.candidate_rules || []).join(', ')]},
    ], rows, {hideCaption: true, class: 'replay', empty: 'None.'})];
}

function reportView(rep) {
  return h('div', {id: 'replay-result'},
    h('p', null, `${rep.replayed} decisions replayed with candidate `, h('span', {class: 'mono'}, String(rep.candidate_revision).slice(0, 19)),
      ` (in force: `, h('span', {class: 'mono'}, String(rep.current_revision).slice(0, 19)), `); ${rep.unchanged} unchanged.`,
      rep.truncated ? ' Only the newest decisions were replayed (the limit).' : ''),
    changesTable('Newly denied', rep.newly_denied, 'replay-denied'),
    changesTable('Newly allowed', rep.newly_allowed, 'replay-allowed'),
    changesTable('Changed rules', rep.changed, 'replay-changed'));
}

// replaySection takes a candidate bundle as a .tar.gz or a directory and
// shows what its replay would change.
export function replaySection(path) {
  const archive = h('input', {id: 'replay-archive', type: 'file', accept: '.tar.gz,.tgz,application/gzip'});
  const dir = h('input', {id: 'replay-dir', type: 'file', webkitdirectory: true, multiple: true});
  const out = h('div', {'aria-live': 'polite'});
  const run = async (files) => {
    const names = Object.keys(files);
    if (!names.some((n) => n.endsWith('.rego'))) {
      fill(out, h('p', {class: 'error', role: 'alert'}, 'No .rego file at the top of the bundle.'));
      return;
    }
    fill(out, h('p', {class: 'muted'}, `Replaying the trail's decisions with ${names.length} files…`));
    try {
      const rep = await api.postJSON(path, JSON.stringify({files}));
      fill(out, reportView(rep));
      announce(`Replay: ${rep.newly_denied.count} newly denied, ${rep.newly_allowed.count} newly allowed`);
    } catch (e) {
      const errs = (e.details && e.details.errors) || [];
      fill(out, errorBox(e), errs.length ? h('pre', {class: 'inline-pre'}, errs.join('\n')) : null);
    }
  };
  archive.addEventListener('change', async () => {
    if (!archive.files.length) return;
    try { await run(await filesOfArchive(archive.files[0])); } catch (e) { fill(out, errorBox(new Error(`Not a .tar.gz of UTF-8 files: ${e.message}`))); }
  });
  dir.addEventListener('change', async () => { if (dir.files.length) await run(await filesOfDirectory(dir.files)); });
  return section('Replay a candidate bundle', h('p', {class: 'help'}, 'The trail\u2019s recorded decisions, decided again by a candidate bundle (its top *.rego and *.json files): what it would newly deny, newly allow, or deny for other rules. Nothing is loaded.'),
    h('div', {class: 'filters'},
      h('div', {class: 'field'}, h('label', {for: 'replay-archive'}, 'A bundle as .tar.gz'), archive),
      h('div', {class: 'field'}, h('label', {for: 'replay-dir'}, 'Or a bundle directory'), dir)),
    out);
}

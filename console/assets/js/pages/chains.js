// chains.js is the top of the audit page: for each chain of the trail,
// whether it verifies, its newest signed checkpoint (size, root, age),
// the witnesses that cosigned it and whether a witness raised an alarm.
// Everything comes from routes that exist: GET /v1/audit/verify, GET
// /v1/audit/checkpoint?chain= (JSON) and the audit.witness_alarm events.

import * as api from '../api.js';
import {h, fill, table, section, errorBox, announce} from '../dom.js';
import * as fmt from '../format.js';
import {badge} from './common.js';

// How many of the newest events are read to find the trail's chains (the
// gateway's own lifecycle chain is always shown, from its checkpoint).
const CHAIN_SCAN = 500;

// age says how long ago an RFC 3339 time was, in words.
export function age(v, now = Date.now()) {
  const t = new Date(v).getTime();
  if (Number.isNaN(t)) return '—';
  const s = Math.max(0, Math.round((now - t) / 1000));
  if (s < 90) return `${s} s ago`;
  if (s < 90 * 60) return `${Math.round(s / 60)} min ago`;
  if (s < 36 * 3600) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} days ago`;
}

// witnessName is the key name of a signed note's signature line
// ("— witness.example/w1 AbCd…").
export function witnessName(line) {
  const m = /^\u2014 (\S+) /.exec(String(line));
  return m ? m[1] : String(line).slice(0, 24);
}

async function checkpointOf(chain) {
  try {
    return await api.getJSON('/v1/audit/checkpoint', chain ? {chain} : null);
  } catch (e) {
    if (e.status === 404) return {chain_id: chain, missing: true};
    return {chain_id: chain, error: e};
  }
}

// chainsOf finds the chains: the gateway's own (its default checkpoint)
// and those of the newest events.
async function chainsOf() {
  const own = await checkpointOf('');
  const page = await api.getJSON('/v1/audit/events', {order: 'newest', limit: CHAIN_SCAN});
  const ids = new Set((page.events || []).map((e) => e.chain_id).filter(Boolean));
  const cps = own.chain_id ? [own] : [];
  for (const id of ids) if (id !== own.chain_id) cps.push(await checkpointOf(id));
  return cps;
}

async function alarmsByChain() {
  const page = await api.getJSON('/v1/audit/events', {type: 'audit.witness_alarm', order: 'newest', limit: 100});
  const by = new Map();
  for (const e of page.events || []) {
    const c = (e.payload && e.payload.chain_id) || '';
    if (!by.has(c)) by.set(c, []);
    by.get(c).push(e);
  }
  return by;
}

function checkpointCell(cp) {
  if (cp.error) return errorBox(cp.error);
  if (cp.missing) return h('span', {class: 'muted'}, 'no checkpoint yet');
  const root = String(cp.root_hash || '');
  return [h('span', null, `${cp.tree_size} events`), ' · ', h('span', {class: 'mono', title: root}, `root ${root.slice(0, 12)}…`),
    ' · ', h('span', {title: fmt.time(cp.created_at)}, `signed ${age(cp.created_at)}`)];
}

function witnessCell(cp) {
  const sigs = cp.cosignatures || [];
  if (cp.error || cp.missing) return '—';
  if (!sigs.length) return h('span', {class: 'muted'}, 'no cosignature');
  return `${sigs.length} cosignature${sigs.length === 1 ? '' : 's'}: ${sigs.map(witnessName).join(', ')}`;
}

function alarmCell(list) {
  if (!list || !list.length) return badge('no alarm', 'ok');
  const last = list[0];
  return [badge(`${list.length} alarm${list.length === 1 ? '' : 's'}`, 'bad'), ' ',
    `newest: ${last.outcome || (last.payload && last.payload.kind) || 'alarm'} from ${(last.payload && last.payload.witness) || 'a witness'}, ${age(last.event_time)}`];
}

function verifyCell(rep, chain) {
  if (!rep) return h('span', {class: 'muted'}, 'checking…');
  if (rep.error) return h('span', {class: 'error-text'}, `${rep.error.code || 'error'}`);
  const mine = (rep.problems || []).filter((p) => (p.chain_id || '') === chain);
  if (!mine.length) return badge('verified', 'ok');
  const kinds = [...new Set(mine.map((p) => p.kind))];
  return [badge(`${mine.length} problem${mine.length === 1 ? '' : 's'}`, 'bad'), ' ', h('code', null, kinds.join(', '))];
}

// chainsSection renders the chains' state, then verifies the trail and
// fills in each chain's result. The button verifies again.
export function chainsSection() {
  const body = h('div', {id: 'chains', 'aria-live': 'polite'}, h('p', {class: 'muted'}, 'Loading the chains…'));
  const summary = h('p', {id: 'verify-result'});
  const again = h('button', {type: 'button', id: 'verify', class: 'secondary'}, 'Verify again');
  let cps = [];
  let alarms = new Map();
  let rep = null;
  const draw = () => fill(body, table('The trail\u2019s chains', [
    {label: 'Chain', cell: (cp) => h('span', {class: 'mono', title: cp.origin || cp.chain_id}, String(cp.chain_id || ''))},
    {label: 'Verify', cell: (cp) => verifyCell(rep, cp.chain_id)},
    {label: 'Latest checkpoint', cell: checkpointCell},
    {label: 'Witnesses', cell: witnessCell},
    {label: 'Alarms', cell: (cp) => alarmCell(alarms.get(cp.chain_id))},
  ], cps, {hideCaption: true, class: 'chains', empty: 'The trail has no chain yet.'}));
  const verify = async () => {
    again.disabled = true;
    rep = null;
    draw();
    fill(summary, h('span', {class: 'muted'}, 'Verifying every chain, hash and checkpoint signature…'));
    try {
      rep = await api.getJSON('/v1/audit/verify');
      const n = (rep.problems || []).length;
      fill(summary, badge(rep.ok ? 'verified' : 'problems', rep.ok ? 'ok' : 'bad'),
        ` ${rep.checked} events checked at ${fmt.time(new Date().toISOString())}; `,
        rep.ok ? 'every hash links and every checkpoint signature holds.' : `${n} problem(s); unsigned_tail or unsigned_chain are events not yet under a checkpoint.`);
      announce(rep.ok ? 'The trail verifies' : 'The trail has problems');
    } catch (e) {
      rep = {error: e};
      fill(summary, errorBox(e));
    } finally {
      again.disabled = false;
      draw();
    }
  };
  again.addEventListener('click', verify);
  const load = async () => {
    try {
      [cps, alarms] = await Promise.all([chainsOf(), alarmsByChain()]);
    } catch (e) {
      fill(body, errorBox(e));
      return;
    }
    draw();
    await verify();
  };
  load();
  return section('Chains', h('p', {class: 'help'}, 'Each chain of the trail: whether it verifies (as sandgate audit verify does), its newest signed checkpoint, the witnesses that cosigned it and the alarms witnesses raised.'),
    body, h('div', {class: 'toolbar'}, summary, again));
}

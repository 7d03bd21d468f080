// events.js says what an audit event records in one line a person reads
// ("alice ran `sh -c …` in sandgate/sandbox:latest"; "bob denied:
// `non_root_user`, …"), with the rules a denial names. Every value is put
// in as text; a field this console does not know is left to the raw JSON.

import {h} from '../dom.js';
import * as fmt from '../format.js';
import {commandLine, runLink} from './common.js';

// The longest command shown in a line; the raw JSON has it whole.
const COMMAND_MAX = 60;

const code = (t) => h('code', null, fmt.textNodes(t));

function command(spec) {
  const line = commandLine(spec && spec.command);
  return line.length > COMMAND_MAX ? `${line.slice(0, COMMAND_MAX - 1)}…` : line;
}

// rulesOf lists the rules a decision event names as violations.
export function rulesOf(e) {
  const v = (e.payload && e.payload.violations) || [];
  return [...new Set(v.map((x) => x && x.rule).filter(Boolean))];
}

function denial(e) {
  const v = ((e.payload && e.payload.violations) || []).filter(Boolean);
  if (!v.length) return ['denied'];
  const first = v[0];
  const more = v.length > 1 ? ` (and ${v.length - 1} more)` : '';
  return ['denied: ', code(first.rule || '?'), first.message ? [', ', fmt.textNodes(first.message)] : null, more];
}

function ran(spec, verb) {
  if (!spec || !spec.command) return [verb];
  return [verb, ' ', code(command(spec)), spec.image ? [' in ', code(spec.image)] : null];
}

function exitWords(e) {
  return e.exit_code === null || e.exit_code === undefined ? '' : ` → exit ${e.exit_code}`;
}

// What each type says after its actor (or its run, for lifecycle events).
const PHRASES = {
  'run.requested': (e, p) => ran(p.spec, 'asked to run'),
  'admission.allowed': (e, p) => ran(p.spec, 'ran'),
  'admission.denied': denial,
  'admission.reviewed': (e, p) => (e.outcome === 'denied' ? ['reviewed a spec, ', denial(e)] : ['reviewed a spec: allowed']),
  'image.resolved': (e, p) => ['image resolved: ', code(p.image || ''), p.image_id ? [' ', code(String(p.image_id).slice(0, 19))] : null],
  'image.unavailable': (e, p) => ['image unavailable: ', code(p.image || '')],
  'container.created': () => ['container created'],
  'container.started': () => ['started'],
  'container.exited': (e) => [`exited${exitWords(e)}`],
  'container.oom_killed': (e) => [`killed for memory${exitWords(e)}`],
  'run.timed_out': (e) => [`stopped at its timeout${exitWords(e)}`],
  'run.cancelled': () => ['cancelled'],
  'run.failed': (e, p) => ['failed', p.error ? [': ', fmt.textNodes(typeof p.error === 'string' ? p.error : p.error.message || '')] : null],
  'run.lost': () => ['lost with its node'],
  'container.removed': () => ['container removed'],
  'policy.loaded': (e) => ['policy loaded, revision ', code(String(e.policy_revision || '').slice(0, 19))],
  'policy.load_failed': (e, p) => ['policy load failed', p.error ? [': ', fmt.textNodes(String(p.error.message || p.error))] : null],
  'policy.replayed': () => ['replayed a policy bundle against the trail'],
  'auth.denied': (e, p) => ['was refused', p.reason ? [': ', fmt.textNodes(p.reason)] : null],
  'audit.exported': () => ['exported the trail'],
  'egress.allowed': (e, p) => ['reached ', code(`${p.host || '?'}:${p.port || '?'}`)],
  'egress.denied': (e, p) => ['was denied ', code(`${p.host || '?'}:${p.port || '?'}`)],
  'session.created': () => ['started a session'],
  'session.ended': (e, p) => ['session ended', p.reason ? ` (${p.reason})` : ''],
  'session.file_put': (e, p) => ['copied into the session', p.path ? [' ', code(p.path)] : null],
  'session.file_get': (e, p) => ['copied out of the session', p.path ? [' ', code(p.path)] : null],
  'audit.witness_alarm': (e, p) => ['witness alarm: ', code(e.outcome || p.kind || ''), p.witness ? [' from ', code(p.witness)] : null],
};

// Lifecycle events read as what happened to the run, not to its principal.
const OF_RUN = new Set(['image.resolved', 'image.unavailable', 'container.created', 'container.started', 'container.exited',
  'container.oom_killed', 'run.timed_out', 'run.cancelled', 'run.failed', 'run.lost', 'container.removed']);

// describe is an event's line; who is a node (the actor as a link adding
// the actor filter, or the run as a link to its page).
export function describe(e, canOpenRuns) {
  const p = e.payload || {};
  const phrase = PHRASES[e.type];
  const tail = phrase ? phrase(e, p) : [code(e.type), e.outcome ? ` (${e.outcome})` : ''];
  let who;
  if (OF_RUN.has(e.type) && e.run_id) {
    who = ['run ', canOpenRuns ? runLink(e.run_id) : h('span', {class: 'mono', title: e.run_id}, fmt.shortID(e.run_id))];
  } else {
    const q = new URLSearchParams({actor: e.actor || ''}).toString();
    who = e.actor ? h('a', {href: `#/audit?${q}`, title: `Only the events of ${e.actor}`}, fmt.textNodes(e.actor)) : 'sandgate';
  }
  return [who, ' ', tail];
}

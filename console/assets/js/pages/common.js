// common.js holds what several pages show the same way.

import {h, announce} from '../dom.js';
import {shortID} from '../format.js';

// badge shows a run's state or outcome as a word with a colour class; the
// word itself carries the meaning, the colour only repeats it.
export function badge(word, kind) {
  if (!word) return h('span', {class: 'badge badge-none'}, '—');
  return h('span', {class: `badge badge-${kind || word}`}, word);
}

// runStatus is a run's state, and its outcome once finished.
export function runStatus(r) {
  if (r.state !== 'finished') return badge(r.state, 'live');
  return badge(r.outcome || 'finished', r.outcome === 'succeeded' ? 'ok' : 'bad');
}

// runLink links to a run's page; the text is its ID's random tail unless
// given, and the whole ID is the link's title.
export function runLink(id, text) {
  return h('a', {href: `#/runs/${encodeURIComponent(id)}`, class: 'mono', title: id}, text || shortID(id));
}

// copyButton copies text to the clipboard, and says so.
export function copyButton(text, what) {
  const b = h('button', {type: 'button', class: 'secondary small copy', 'aria-label': `Copy the whole ${what}`}, 'Copy');
  b.addEventListener('click', async () => {
    try {
      await navigator.clipboard.writeText(text);
      b.textContent = 'Copied';
      announce(`The ${what} is copied`);
    } catch (_) {
      b.textContent = 'Copy refused';
      announce(`The browser refused to copy the ${what}; select it instead`);
    }
  });
  return b;
}

export function auditLink(params, text) {
  const q = new URLSearchParams(params).toString();
  return h('a', {href: `#/audit?${q}`, class: 'mono'}, text);
}

// commandLine shows a command as one line, each argument quoted when it
// needs to be.
export function commandLine(cmd) {
  if (!Array.isArray(cmd)) return '';
  return cmd.map((a) => (/^[A-Za-z0-9_./:=,+-]+$/.test(a) ? a : JSON.stringify(a))).join(' ');
}

// violationsTable shows a decision's violations or warnings.
export function violations(list, table, empty) {
  return table(null, [
    {label: 'Rule', cell: (v) => h('code', null, v.rule || '')},
    {label: 'Action', cell: (v) => badge(v.action || 'deny', v.action === 'warn' ? 'warn' : 'bad')},
    {label: 'Severity', cell: (v) => v.severity || '—'},
    {label: 'Controls', cell: (v) => (v.controls || []).join(', ') || '—'},
    {label: 'Reason', cell: (v) => v.message || ''},
    {label: 'Count', cell: (v) => String(v.count || 1), class: 'num'},
  ], list || [], {empty: empty || 'No violations.', class: 'violations'});
}

// keepFocus re-renders part of a page that updates live without losing
// the keyboard focus: the focused element's data-key is found again in
// the new content.
export function keepFocus(container, renderFn) {
  const active = document.activeElement;
  const key = active && container.contains(active) ? active.dataset.key : null;
  renderFn();
  if (key) {
    const again = container.querySelector(`[data-key="${CSS.escape(key)}"]`);
    if (again) again.focus();
  }
}

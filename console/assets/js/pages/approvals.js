// The approvals page: the requests a policy answered require_approval
// (GET /v1/approvals). "Pending" shows each with who asked, the rule
// that asked for approval and why, what was asked, its age and when it
// expires, and a comment box with Approve and Deny
// (POST /v1/approvals/{id}/approve|deny). "History" lists the decided
// ones. Who may decide is the policy's to say: a refusal (the requester
// approving their own, say) shows the API's error with its code.

import * as api from '../api.js';
import {h, fill, table, announce, errorBox, dl} from '../dom.js';
import * as fmt from '../format.js';
import {badge, runLink, commandLine} from './common.js';

const tabs = [
  {key: 'pending', label: 'Pending'},
  {key: 'history', label: 'History'},
];

// runRef links to a run's page for those whose roles open it (an
// approver alone does not read runs), else names it.
function runRef(id) {
  return api.hasRole('submitter', 'auditor', 'admin') ? runLink(id) : h('span', {class: 'mono', title: id}, fmt.shortID(id));
}

// subject links to the approval's run or session.
function subject(a) {
  if (a.run_id) return ['run ', runRef(a.run_id)];
  if (a.session_id) return ['session ', h('a', {href: `#/sessions/${encodeURIComponent(a.session_id)}`, class: 'mono', title: a.session_id}, fmt.shortID(a.session_id))];
  return a.operation || '';
}

// reasons are the findings that asked for approval: rule, then why.
function reasons(a) {
  return h('ul', {class: 'reasons'}, (a.reasons || []).map((r) => h('li', null, h('code', null, r.rule || ''), r.message ? ` — ${r.message}` : '')));
}

// asked summarises the spec an approver approves.
function asked(a) {
  const s = a.spec || {};
  const res = s.resources || {};
  const parts = [
    res.memory_mb ? `${res.memory_mb} MiB memory` : null,
    res.cpus ? `${res.cpus} CPU` : null,
    s.network ? `network ${s.network}` : null,
    s.timeout_seconds ? `timeout ${s.timeout_seconds} s` : null,
  ].filter(Boolean);
  return [h('code', null, commandLine(s.command) || '(the image\'s command)'), ' in ', h('span', {class: 'mono'}, s.image || '—'),
    parts.length ? h('div', {class: 'muted'}, parts.join(', ')) : null,
    a.limits ? h('div', {class: 'muted'}, `session lifetime ${fmt.duration((a.limits.max_lifetime_seconds || 0) * 1000)}`) : null];
}

// untilExpiry says how long an approval has left.
function untilExpiry(a, now) {
  const left = Date.parse(a.expires_at) - now;
  if (Number.isNaN(left)) return '—';
  return left > 0 ? `in ${fmt.duration(left)} (${fmt.time(a.expires_at)})` : `expired (${fmt.time(a.expires_at)})`;
}

// outcome says what became of a decided request.
function outcome(res) {
  const a = res.approval;
  if (res.run) {
    return [badge(a.status, a.status === 'granted' ? 'ok' : 'bad'), ' run ', runRef(res.run.id), ' is ',
      h('span', {class: 'run-state', dataset: {state: res.run.state}}, res.run.state)];
  }
  if (res.session) return [badge(a.status, a.status === 'granted' ? 'ok' : 'bad'), ` session ${res.session.state || ''}`];
  return badge(a.status, a.status === 'granted' ? 'ok' : 'bad');
}

// card is one pending approval with its decision form.
// The card stays after its decision, showing what became of the request.
function card(a, now) {
  const key = a.id.slice(-8);
  const comment = h('textarea', {id: `c-${key}`, rows: '2', maxlength: '4096', 'data-key': `comment-${a.id}`});
  const result = h('div', {class: 'result', 'aria-live': 'polite'});
  const buttons = [];
  const decide = async (verb) => {
    for (const b of buttons) b.disabled = true;
    fill(result);
    try {
      const res = await api.postJSON(`/v1/approvals/${encodeURIComponent(a.id)}/${verb}`, {comment: comment.value});
      fill(result, h('p', null, outcome(res)));
      announce(`Approval ${res.approval.status}`);
    } catch (e) {
      fill(result, errorBox(e));
      for (const b of buttons) b.disabled = false;
    }
  };
  buttons.push(h('button', {type: 'button', 'data-key': `approve-${a.id}`, onclick: () => decide('approve')}, 'Approve'));
  buttons.push(h('button', {type: 'button', class: 'secondary', 'data-key': `deny-${a.id}`, onclick: () => decide('deny')}, 'Deny'));
  const title = `approval-${key}`;
  return h('article', {class: 'panel approval', 'aria-labelledby': title, dataset: {approval: a.id}},
    h('h2', {id: title}, `${a.operation === 'session' ? 'Session' : 'Run'} asked by ${a.requester}`, a.team ? ` (${a.team})` : ''),
    dl([
      ['For', subject(a)],
      ['Why', reasons(a)],
      ['Asked', asked(a)],
      ['Age', fmt.duration(now - Date.parse(a.created_at))],
      ['Expires', untilExpiry(a, now)],
    ]),
    h('label', {for: comment.id}, 'Comment'), comment,
    h('div', {class: 'actions'}, buttons),
    result);
}

async function list(status) {
  const page = await api.getJSON('/v1/approvals', {status, limit: 100});
  return page.approvals || [];
}

function renderPending(body, items) {
  const now = Date.now();
  fill(body, items.length === 0
    ? h('p', {class: 'muted'}, 'Nothing waits for approval.')
    : items.map((a) => card(a, now)));
}

function renderHistory(body, items) {
  fill(body, table('Decided approvals, newest first', [
    {label: 'Status', cell: (a) => badge(a.status, a.status === 'granted' ? 'ok' : (a.status === 'expired' ? 'warn' : 'bad'))},
    {label: 'For', cell: subject},
    {label: 'Asked by', cell: (a) => [a.requester, a.team ? h('span', {class: 'muted'}, ` (${a.team})`) : '']},
    {label: 'Why', cell: (a) => (a.reasons || []).map((r) => r.rule).join(', ')},
    {label: 'Decided by', cell: (a) => a.decided_by || '—'},
    {label: 'Comment', cell: (a) => a.comment || ''},
    {label: 'Decided', cell: (a) => fmt.time(a.decided_at)},
  ], items, {class: 'approvals', empty: 'No approval has been decided.', rowAttrs: (a) => ({dataset: {approval: a.id, status: a.status}})}));
}

export async function render(view, {params}) {
  const tab = params.get('tab') === 'history' ? 'history' : 'pending';
  const body = h('div', {id: 'approvals-body'});
  fill(view, h('h1', null, 'Approvals'),
    h('p', {class: 'help'}, 'Requests the policy lets run only once someone else approves them. The policy decides who may approve: never the requester.'),
    h('nav', {'aria-label': 'Approvals', class: 'tabs'}, h('ul', null, tabs.map((t) => h('li', null,
      h('a', {href: t.key === 'pending' ? '#/approvals' : '#/approvals?tab=history', id: `tab-${t.key}`, 'aria-current': t.key === tab ? 'page' : null}, t.label))))),
    body);
  if (tab === 'history') {
    const all = await list('');
    renderHistory(body, all.filter((a) => a.status !== 'pending'));
    return null;
  }
  renderPending(body, await list('pending'));
  return null;
}

// The policies page: the policy in force (GET /v1/policies: revision,
// modules with their hashes, the last load error), a reload for those who
// may, and a review box that asks POST /v1/admission/review for the
// decision on a pasted spec without running it. The rules, the load
// history and the replay of an uploaded bundle are in policybundle.js.

import * as api from '../api.js';
import {h, fill, table, dl, section, errorBox, json, announce} from '../dom.js';
import * as fmt from '../format.js';
import {badge, violations} from './common.js';
import {rulesSection, historySection, replaySection} from './policybundle.js';

const EXAMPLE = `{
  "image": "sandgate/sandbox:latest",
  "command": ["sh", "-c", "id"],
  "privileged": true,
  "network": "host"
}`;

function statusSection(st) {
  return [
    dl([
      ['Revision', h('span', {class: 'mono', id: 'policy-revision'}, st.revision || '—')],
      ['Source', st.source || '—'],
      ['Loaded', fmt.time(st.loaded_at)],
      ['Last load error', st.last_error
        ? h('span', {class: 'error-text'}, `${st.last_error_at ? `${fmt.time(st.last_error_at)}: ` : ''}`, h('pre', {class: 'inline-pre'}, st.last_error))
        : 'none'],
    ]),
    h('details', {class: 'modules'}, h('summary', null, `${(st.modules || []).length} modules with their SHA-256`),
      table('Modules', [
        {label: 'Module', cell: (m) => h('code', null, m.name)},
        {label: 'SHA-256', cell: (m) => h('span', {class: 'mono'}, m.sha256)},
      ], st.modules || [], {empty: 'No modules.', hideCaption: true})),
  ];
}

function decisionView(d) {
  const allowed = !!d.allow;
  return h('div', {id: 'review-result', class: ['decision', allowed ? 'ok' : 'bad']},
    h('p', {class: 'verdict'}, badge(allowed ? 'allowed' : 'denied', allowed ? 'ok' : 'bad'),
      ` by revision `, h('span', {class: 'mono'}, d.policy_revision || ''), ' · decision ', h('span', {class: 'mono'}, d.decision_id || '')),
    h('h3', null, 'Violations'), violations(d.violations, table, 'No rule denies this spec.'),
    h('h3', null, 'Warnings'), violations(d.warnings, table, 'No warnings.'),
    (d.mutations || []).length ? [h('h3', null, 'Mutations'), table(null, [
      {label: 'Rule', cell: (m) => h('code', null, m.rule || '')}, {label: 'Path', cell: (m) => h('code', null, m.path || '')},
      {label: 'Value', cell: (m) => h('code', null, JSON.stringify(m.value))}], d.mutations)] : null,
    d.spec ? h('details', null, h('summary', null, 'The normalised spec the policy judged'), json(d.spec)) : null);
}

function reviewSection() {
  const ta = h('textarea', {id: 'review-spec', name: 'spec', rows: 10, spellcheck: 'false', 'aria-describedby': 'review-help'}, EXAMPLE);
  const out = h('div', {'aria-live': 'polite'});
  const form = h('form', {class: 'review', 'aria-label': 'Review a run spec'},
    h('label', {for: 'review-spec'}, 'Run spec (JSON)'),
    h('p', {id: 'review-help', class: 'help'}, 'The body of POST /v1/runs. Nothing runs: the gateway answers the decision and records the review in the audit trail (admission.reviewed).'),
    ta, h('p', null, h('button', {type: 'submit', id: 'review-submit'}, 'Review')), out);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    fill(out, h('p', {class: 'muted'}, 'Asking the policy…'));
    try {
      JSON.parse(ta.value);
    } catch (e) {
      fill(out, h('p', {class: 'error', role: 'alert'}, `Not JSON: ${e.message}`));
      return;
    }
    try {
      const d = await api.postJSON('/v1/admission/review', ta.value);
      fill(out, decisionView(d));
      announce(d.allow ? 'Review: allowed' : `Review: denied by ${(d.violations || []).length} rule(s)`);
    } catch (e) {
      fill(out, errorBox(e));
    }
  });
  return section('Review a spec', form);
}

export async function render(view, ctx) {
  const parts = [h('h1', null, 'Policies')];
  if (api.hasRole('security', 'admin', 'auditor')) {
    const body = h('div');
    const sec = section('Policy in force', body);
    const rules = h('div');
    const draw = (st) => { fill(body, statusSection(st)); fill(rules, rulesSection(st.rules)); };
    try { draw(await api.getJSON('/v1/policies')); } catch (e) { fill(body, errorBox(e)); }
    if (api.hasRole('security', 'admin')) {
      const msg = h('div', {'aria-live': 'polite'});
      const b = h('button', {type: 'button', class: 'secondary', id: 'policy-reload'}, 'Reload from the policy directory');
      b.addEventListener('click', async () => {
        fill(msg, h('p', {class: 'muted'}, 'Reloading…'));
        try {
          const st = await api.postJSON('/v1/policies/reload', '');
          draw(st);
          fill(msg, h('p', null, 'Reloaded: revision ', h('span', {class: 'mono'}, st.revision)));
        } catch (e) {
          const errs = (e.details && e.details.errors) || [];
          fill(msg, errorBox(e), errs.length ? h('pre', {class: 'inline-pre'}, errs.join('\n')) : null,
            h('p', null, 'The policy in force was kept.'));
        }
      });
      sec.append(h('p', null, b), msg);
    }
    parts.push(sec, rules);
    try { parts.push(await historySection()); } catch (e) { parts.push(errorBox(e)); }
  } else {
    parts.push(h('p', {class: 'muted'}, 'The policy in force is shown to the security, auditor and admin roles. Any principal may review a spec.'));
  }
  parts.push(reviewSection());
  if (ctx.features.replay) parts.push(replaySection(ctx.features.replay));
  fill(view, parts);
  return null;
}

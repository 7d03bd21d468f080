// app.js is the console's entry point: sign-in, navigation and the
// router. Pages live at #/overview, #/runs, #/runs/<id>, #/sessions,
// #/sessions/<id>, #/approvals, #/policies, #/audit and #/nodes; the part after "?"
// holds a page's filters. A new page is one entry in pages and one link
// in index.html's navigation. Routing never
// reloads the page, so the token held in memory stays until sign-out.

import * as api from './api.js';
import {h, fill, announce, errorBox} from './dom.js';
import * as overview from './pages/overview.js';
import * as runs from './pages/runs.js';
import * as run from './pages/run.js';
import * as policies from './pages/policies.js';
import * as audit from './pages/audit.js';
import * as sessions from './pages/sessions.js';
import * as nodes from './pages/nodes.js';
import * as approvals from './pages/approvals.js';

// Which roles may open each page; the API refuses the rest anyway, this
// only keeps the navigation to what will work.
const pages = {
  overview: {title: 'Overview', mod: overview, roles: null},
  runs: {title: 'Runs', mod: runs, roles: ['submitter', 'auditor', 'admin']},
  run: {title: 'Run', mod: run, roles: ['submitter', 'auditor', 'admin'], nav: 'runs'},
  policies: {title: 'Policies', mod: policies, roles: null},
  audit: {title: 'Audit', mod: audit, roles: ['auditor', 'admin']},
  sessions: {title: 'Sessions', mod: {render: sessions.renderList}, roles: ['submitter', 'auditor', 'admin']},
  session: {title: 'Session', mod: {render: sessions.renderOne}, roles: ['submitter', 'auditor', 'admin'], nav: 'sessions'},
  approvals: {title: 'Approvals', mod: approvals, roles: ['submitter', 'approver', 'auditor', 'admin']},
  nodes: {title: 'Nodes', mod: nodes, roles: ['admin']},
};

let cleanup = null;
let renderSeq = 0;

// parseRoute reads location.hash: "#/runs/ID?team=x" → {page, id, params}.
export function parseRoute(hash) {
  const raw = (hash || '').replace(/^#\/?/, '');
  const [p, q] = raw.split('?', 2);
  const parts = p.split('/').filter(Boolean).map((x) => { try { return decodeURIComponent(x); } catch (_) { return x; } });
  const params = new URLSearchParams(q || '');
  if (parts[0] === 'runs' && parts[1]) return {page: 'run', id: parts[1], params};
  if (parts[0] === 'sessions' && parts[1]) return {page: 'session', id: parts[1], params};
  return {page: pages[parts[0]] ? parts[0] : 'overview', id: null, params};
}

// go navigates to a page with filters, as a new history entry.
export function go(path, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v !== undefined && v !== null && v !== '') q.set(k, v);
  const qs = q.toString();
  const target = `#/${path}${qs ? `?${qs}` : ''}`;
  if (window.location.hash === target) route();
  else window.location.hash = target;
}

function allowed(page) {
  return !page.roles || api.hasRole(...page.roles);
}

// issuerName is how the sign-in button names the identity provider: its
// host, which is what a person recognises in the address bar.
export function issuerName(issuer) {
  try { return new URL(issuer).host || issuer; } catch (_) { return issuer || 'your identity provider'; }
}

function showSignIn(message) {
  if (cleanup) { cleanup(); cleanup = null; }
  document.getElementById('view').hidden = true;
  fill(document.getElementById('view'));
  document.getElementById('nav').hidden = true;
  document.getElementById('who').hidden = true;
  document.getElementById('signin').hidden = false;
  const err = document.getElementById('signin-error');
  err.textContent = message || '';
  document.title = 'Sign in — sandgate console';
  document.getElementById('token').focus();
}

function showShell() {
  const p = api.me();
  document.getElementById('signin').hidden = true;
  document.getElementById('view').hidden = false;
  document.getElementById('nav').hidden = false;
  document.getElementById('who').hidden = false;
  fill(document.getElementById('who-name'), p.name, p.team ? ` (${p.team})` : '', h('span', {class: 'muted'}, ` · ${(p.roles || []).join(', ')}`));
  for (const a of document.querySelectorAll('#nav a[data-page]')) {
    a.parentElement.hidden = !allowed(pages[a.dataset.page]);
  }
}

async function route() {
  if (!api.signedIn()) { showSignIn(); return; }
  if (cleanup) { cleanup(); cleanup = null; }
  const r = parseRoute(window.location.hash);
  const page = pages[r.page];
  const navName = page.nav || r.page;
  for (const a of document.querySelectorAll('#nav a[data-page]')) {
    if (a.dataset.page === navName) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  const view = document.getElementById('view');
  document.title = `${page.title} — sandgate console`;
  const mine = ++renderSeq;
  if (!allowed(page)) {
    fill(view, h('h1', null, page.title), h('p', {class: 'error', role: 'alert'},
      `This page needs the role ${page.roles.join(' or ')}; you hold ${(api.me().roles || []).join(', ') || 'none'}.`));
    return;
  }
  fill(view, h('p', {class: 'muted'}, 'Loading…'));
  try {
    const feats = await api.features();
    if (mine !== renderSeq) return;
    cleanup = await page.mod.render(view, {id: r.id, params: r.params, go, features: feats, isCurrent: () => mine === renderSeq});
    announce(`${page.title} page loaded`);
  } catch (e) {
    if (mine !== renderSeq || !api.signedIn()) return;
    fill(view, h('h1', null, page.title), errorBox(e));
  }
}

function start() {
  api.whenUnauthenticated((err) => showSignIn(`Signed out: ${err.message}`));
  document.getElementById('signin-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const input = document.getElementById('token');
    const t = input.value.trim();
    input.value = '';
    const err = document.getElementById('signin-error');
    err.textContent = '';
    if (!t) { err.textContent = 'Enter a token.'; input.focus(); return; }
    try {
      await api.signIn(t);
    } catch (e) {
      err.textContent = e.status === 401 ? 'That token is not valid.' : `${e.code || 'Error'}: ${e.message}`;
      input.focus();
      return;
    }
    showShell();
    await route();
    document.getElementById('main').focus();
  });
  document.getElementById('signout').addEventListener('click', async () => {
    try {
      await api.signOut();
      showSignIn('Signed out.');
    } catch (e) {
      showSignIn(`Signed out here, but the gateway did not confirm: ${e.message}`);
    }
  });
  document.getElementById('skip').addEventListener('click', (ev) => {
    ev.preventDefault();
    document.getElementById('main').focus();
  });
  window.addEventListener('hashchange', () => { if (api.signedIn()) route(); });
  showSignIn();
  offerSSO();
}

// offerSSO shows the identity provider's button when the gateway has
// console sign-in, and resumes the cookie session the provider's
// callback left, if any: an ended one is said so.
async function offerSSO() {
  const a = await api.auth();
  if (!a.sso) return;
  document.getElementById('sso-issuer').textContent = issuerName(a.issuer);
  document.getElementById('sso').hidden = false;
  // A token typed in the meantime has signed in already.
  if (api.signedIn()) return;
  try {
    await api.resumeSession();
  } catch (e) {
    if (e.details && e.details.sign_in === 'session_ended') showSignIn(`${e.code}: ${e.message}`);
    return;
  }
  if (api.signedIn()) {
    showShell();
    await route();
    document.getElementById('main').focus();
  }
}

start();

// api.js talks to the gateway's HTTP API, signed in one of two ways.
// With a bearer token: the token lives in this module's memory only; it
// goes out in the Authorization header of same-origin requests, never in
// a URL, a cookie or storage, and is gone when the page is closed or
// reloaded. With the identity provider (single sign-on): the gateway
// keeps the session in a __Host- HttpOnly SameSite=Strict cookie that
// this script never sees; requests send it same-origin only, and every
// request that changes something carries the X-Sandgate-CSRF header the
// gateway demands of a cookie session. Every role is enforced by the
// API; the console only hides what the API would refuse.

let token = null;
// session is true when the console is signed in by the gateway's session
// cookie (single sign-on) rather than a token.
let session = false;
let principal = null;
let openapi = null;
let onUnauthenticated = () => {};

// ApiError is an error answer of the API: its HTTP status, the stable
// code, the message and the correlation ID of the request.
export class ApiError extends Error {
  constructor(status, code, message, correlationId, details) {
    super(message);
    this.status = status;
    this.code = code;
    this.correlationId = correlationId;
    this.details = details || {};
  }
}

// whenUnauthenticated sets what happens when the API refuses the token
// (it was removed from the tokens file, say): the console signs out.
export function whenUnauthenticated(fn) { onUnauthenticated = fn; }

// signIn checks the token with GET /v1/whoami and keeps it.
export async function signIn(t) {
  token = t;
  try {
    principal = await getJSON('/v1/whoami');
    return principal;
  } catch (e) {
    token = null;
    principal = null;
    throw e;
  }
}

// auth reads how this gateway lets people sign in:
// {sso: bool, issuer: URL}.
export async function auth() {
  try {
    const resp = await fetch('/console/auth.json', {credentials: 'omit', cache: 'no-store', redirect: 'error'});
    if (resp.ok) return await resp.json();
  } catch (_) { /* an older gateway: tokens only */ }
  return {sso: false};
}

// resumeSession checks with GET /v1/whoami whether the gateway's session
// cookie signs this browser in, and keeps the principal when it does. It
// throws the API's error otherwise (401: none, or it has ended).
export async function resumeSession() {
  session = true;
  try {
    principal = await getJSON('/v1/whoami');
    return principal;
  } catch (e) {
    session = false;
    principal = null;
    throw e;
  }
}

// viaSession reports whether the console is signed in by the session
// cookie.
export function viaSession() { return session; }

// signOut forgets the token and everything learnt with it; a cookie
// session is ended at the gateway too (POST /console/logout).
export async function signOut() {
  const wasSession = session;
  token = null;
  session = false;
  principal = null;
  openapi = null;
  if (wasSession) {
    await fetch('/console/logout', {method: 'POST', headers: {'X-Sandgate-CSRF': '1'},
      credentials: 'same-origin', cache: 'no-store', redirect: 'error', referrerPolicy: 'no-referrer'});
  }
}

// forget drops what was learnt without asking the gateway: its answer
// already said the session or token is gone.
function forget() {
  token = null;
  session = false;
  principal = null;
  openapi = null;
}

export function signedIn() { return (token !== null || session) && principal !== null; }
export function me() { return principal; }

// hasRole reports whether the principal holds one of roles.
export function hasRole(...roles) {
  return !!principal && (principal.roles || []).some((r) => roles.includes(r));
}

function url(path, params) {
  const u = new URL(path, window.location.origin);
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== '') u.searchParams.set(k, String(v));
  }
  return u;
}

async function toError(resp) {
  const corr = resp.headers.get('X-Correlation-ID') || '';
  let body = null;
  try { body = await resp.json(); } catch (_) { /* not the error shape */ }
  const e = body && body.error;
  if (e && e.code) return new ApiError(resp.status, e.code, e.message || '', e.correlation_id || corr, e.details);
  return new ApiError(resp.status, `HTTP ${resp.status}`, resp.statusText || 'request failed', corr, {});
}

// request sends one request and returns the response, or throws an
// ApiError for an error answer.
export async function request(method, path, {params, body, accept, signal} = {}) {
  if (token === null && !session) throw new ApiError(401, 'SANDGATE-UNAUTHENTICATED', 'not signed in', '', {});
  const headers = {Accept: accept || 'application/json'};
  if (token !== null) headers.Authorization = `Bearer ${token}`;
  else if (method !== 'GET' && method !== 'HEAD') headers['X-Sandgate-CSRF'] = '1';
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const resp = await fetch(url(path, params), {
    method, headers, body, signal,
    credentials: session ? 'same-origin' : 'omit', cache: 'no-store', redirect: 'error', referrerPolicy: 'no-referrer',
  });
  if (!resp.ok) {
    const err = await toError(resp);
    if (resp.status === 401 && principal !== null) {
      forget();
      onUnauthenticated(err);
    }
    throw err;
  }
  return resp;
}

export async function getJSON(path, params, signal) {
  const resp = await request('GET', path, {params, signal});
  return resp.json();
}

export async function postJSON(path, value, params) {
  const body = typeof value === 'string' ? value : JSON.stringify(value);
  const resp = await request('POST', path, {params, body});
  return resp.json();
}

// stream reads a Server-Sent Events answer with fetch (EventSource cannot
// send an Authorization header), calling onEvent({event, id, data}) for
// each event, until the stream ends or signal aborts.
export async function stream(path, params, onEvent, signal) {
  const resp = await request('GET', path, {params, accept: 'text/event-stream', signal});
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  let ev = {event: '', id: '', data: []};
  for (;;) {
    const {value, done} = await reader.read();
    if (done) return;
    buf += value;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      let line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      if (line.endsWith('\r')) line = line.slice(0, -1);
      if (line === '') {
        if (ev.event || ev.data.length) onEvent({event: ev.event || 'message', id: ev.id, data: ev.data.join('\n')});
        ev = {event: '', id: '', data: []};
        continue;
      }
      if (line.startsWith(':')) continue;
      const c = line.indexOf(':');
      const field = c < 0 ? line : line.slice(0, c);
      let v = c < 0 ? '' : line.slice(c + 1);
      if (v.startsWith(' ')) v = v.slice(1);
      if (field === 'event') ev.event = v;
      else if (field === 'id') ev.id = v;
      else if (field === 'data') ev.data.push(v);
    }
  }
}

function filenameOf(resp, fallback) {
  const cd = resp.headers.get('Content-Disposition') || '';
  const m = /filename="([A-Za-z0-9._-]{1,128})"/.exec(cd);
  return m ? m[1] : fallback;
}

// download fetches path with the token and hands the body to the browser
// as a file, through a blob: URL (a plain link could not carry the
// token). It returns the file's name and size.
export async function download(path, params, fallbackName) {
  const resp = await request('GET', path, {params, accept: '*/*'});
  const blob = await resp.blob();
  const name = filenameOf(resp, fallbackName);
  const href = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = href;
  a.download = name;
  a.hidden = true;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(href), 60_000);
  return {name, size: blob.size};
}

// features reads the API's OpenAPI document once and says which optional
// parts this gateway serves, so that pages show a section only when the
// API behind it exists.
export async function features() {
  if (!openapi) {
    try {
      openapi = await getJSON('/v1/openapi.json');
    } catch (_) {
      openapi = {paths: {}};
    }
  }
  const paths = openapi.paths || {};
  const find = (re, method = 'get') => Object.keys(paths).find((p) => re.test(p) && paths[p] && paths[p][method]) || null;
  const schemas = (openapi.components && openapi.components.schemas) || {};
  return {
    artifacts: find(/^\/v1\/runs\/\{[^}]+\}\/artifacts$/),
    artifactFile: find(/^\/v1\/runs\/\{[^}]+\}\/artifacts\/\{[^}]+\}$/),
    artifactsTar: find(/^\/v1\/runs\/\{[^}]+\}\/artifacts\.tar$/),
    receipt: find(/receipt/),
    checkpoint: find(/^\/v1\/audit\/checkpoint$/),
    witness: find(/witness/),
    replay: find(/replay/, 'post'),
    previews: find(/^\/v1\/sessions\/\{[^}]+\}\/previews$/, 'post'),
    eventTypes: (schemas.EventType && schemas.EventType.enum) || [],
    outcomes: (schemas.Outcome && schemas.Outcome.enum) || [],
  };
}

// fillPath puts values into an OpenAPI path's {parameters}, in order;
// values left over become query parameters named by the caller.
export function fillPath(template, ...values) {
  let i = 0;
  return template.replace(/\{[^}]+\}/g, () => encodeURIComponent(values[i++] ?? ''));
}

// dom.js builds the page with the DOM alone. Nothing here, or anywhere in
// the console, parses a string as HTML: text goes in as text nodes, so a
// label or an output line holding "<script>" shows those characters. The
// page's Content-Security-Policy (Trusted Types) would refuse an
// innerHTML assignment anyway.

const SVG_NS = 'http://www.w3.org/2000/svg';

// Attributes that take a URL are given only fragment links made by the
// console (#/runs/…), blob: URLs it created, or a port link the gateway
// minted (/v1/sessions/<id>/previews/<link>/, same origin); anything else
// is dropped.
const PREVIEW_LINK = /^\/v1\/sessions\/[A-Za-z0-9-]+\/previews\/[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\/$/;

function safeURL(v) {
  const s = String(v);
  return s.startsWith('#') || s.startsWith('blob:') || PREVIEW_LINK.test(s) ? s : null;
}

function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') {
      el.setAttribute('class', Array.isArray(v) ? v.filter(Boolean).join(' ') : v);
    } else if (k === 'text') {
      el.textContent = String(v);
    } else if (k.startsWith('on') && typeof v === 'function') {
      el.addEventListener(k.slice(2), v);
    } else if (k === 'href' || k === 'src') {
      const u = safeURL(v);
      if (u !== null) el.setAttribute(k, u);
    } else if (k === 'dataset') {
      for (const [dk, dv] of Object.entries(v)) el.dataset[dk] = String(dv);
    } else if (v === true) {
      el.setAttribute(k, '');
    } else {
      el.setAttribute(k, String(v));
    }
  }
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// h makes an HTML element: h('a', {href: '#/runs'}, 'Runs').
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  return append(el, children);
}

// s makes an SVG element.
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  setAttrs(el, attrs);
  return append(el, children);
}

// clear empties el and fills it with children.
export function fill(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

// announce tells screen readers what just happened.
export function announce(msg) {
  const st = document.getElementById('status');
  if (st) st.textContent = msg;
}

// table builds a data table: cols are {label, cell(row) -> node|string}.
export function table(caption, cols, rows, opts = {}) {
  return h('table', {class: ['data', opts.class]},
    caption ? h('caption', {class: opts.hideCaption ? 'sr-only' : null}, caption) : null,
    h('thead', null, h('tr', null, cols.map((c) => h('th', {scope: 'col', class: c.class}, c.label)))),
    h('tbody', null, rows.length === 0
      ? h('tr', null, h('td', {colspan: cols.length, class: 'empty'}, opts.empty || 'Nothing to show.'))
      : rows.map((r) => h('tr', opts.rowAttrs ? opts.rowAttrs(r) : null, cols.map((c) => h('td', {class: c.class}, c.cell(r)))))));
}

// dl builds a description list from [term, value] pairs, skipping
// pairs whose value is undefined.
// Each pair is a div (dl > div > dt + dd), so that a grid of tiles keeps
// every term above its value.
export function dl(pairs, cls) {
  return h('dl', {class: ['facts', cls]}, pairs.filter((p) => p && p[1] !== undefined).map(([k, v]) => h('div', null, h('dt', null, k), h('dd', null, v))));
}

// section makes a titled part of a page.
export function section(title, ...children) {
  const id = 'sec-' + title.toLowerCase().replace(/[^a-z0-9]+/g, '-');
  return h('section', {class: 'panel', 'aria-labelledby': id}, h('h2', {id}, title), ...children);
}

// errorBox shows an API error, with its code and correlation ID.
export function errorBox(err) {
  return h('p', {class: 'error', role: 'alert'},
    err && err.code ? `${err.code}: ` : '', err && err.message ? err.message : String(err),
    err && err.correlationId ? h('span', {class: 'muted'}, ` (correlation ID ${err.correlationId})`) : null);
}

// json shows a value as indented JSON text.
// It can be focused, so that the keyboard scrolls it when it overflows.
export function json(v) {
  return h('pre', {class: 'json', tabindex: '0'}, JSON.stringify(v, null, 2));
}

// format.js turns API values into text for people: times, durations,
// sizes, and captured output made safe to show.

import {h} from './dom.js';

// time shows an RFC 3339 time in UTC, to the second ("2026-11-22 14:03:07Z").
export function time(v) {
  if (!v) return '—';
  const d = new Date(v);
  if (Number.isNaN(d.getTime())) return String(v);
  return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

// timeMs shows a time to the millisecond, for timelines.
export function timeMs(v) {
  if (!v) return '—';
  const d = new Date(v);
  if (Number.isNaN(d.getTime())) return String(v);
  return d.toISOString().replace('T', ' ');
}

export function duration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return '—';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
  const m = Math.floor(ms / 60_000);
  return `${m} min ${Math.round((ms % 60_000) / 1000)} s`;
}

export function bytes(n) {
  if (n === null || n === undefined) return '—';
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return `${v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}

// shortID shows an ID by its last 8 characters: a UUIDv7's first 8 are
// its timestamp, the same for every run of a minute, while its tail is
// random and tells runs apart ("…9e4f1a2b").
export function shortID(id) {
  if (!id) return '—';
  const str = String(id);
  return str.length > 8 ? `…${str.slice(-8)}` : str;
}

// Words for the usage figures a run reports (GET /v1/runs/{id}'s usage).
const USAGE_LABELS = {
  cpu_ms: 'CPU time', cpu_user_ms: 'CPU time in user space', cpu_system_ms: 'CPU time in the kernel',
  memory_peak_bytes: 'peak memory', pids_peak: 'peak processes and threads',
  io_read_bytes: 'read from disk', io_write_bytes: 'written to disk',
  net_rx_bytes: 'network received', net_tx_bytes: 'network sent',
  wall_ms: 'wall-clock time', source: 'measured by', sampled_at: 'last sampled',
};

// usageLabel names a usage figure in words; a figure this console does not
// know yet keeps its field name with spaces.
export function usageLabel(key) { return USAGE_LABELS[key] || key.replace(/_/g, ' '); }

// toRFC3339 turns the value of a datetime-local input (the viewer's local
// time) into what the API's since and until take.
export function toRFC3339(local) {
  if (!local) return '';
  const d = new Date(local);
  return Number.isNaN(d.getTime()) ? '' : d.toISOString();
}

// outputBytes returns the bytes of an API output ({data, encoding}).
export function outputBytes(o) {
  if (!o || !o.data) return new Uint8Array(0);
  if (o.encoding === 'base64') {
    const bin = atob(o.data);
    const b = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) b[i] = bin.charCodeAt(i);
    return b;
  }
  return new TextEncoder().encode(o.data);
}

const hex2 = (n) => n.toString(16).padStart(2, '0');

// Code points shown as escapes rather than as themselves: C0 and C1
// controls but tab and newline, DEL, the line and paragraph separators,
// and the bidirectional overrides and isolates that can make text read
// differently from what it is.
function escapedCodePoint(cp) {
  return (cp < 0x20 && cp !== 0x09 && cp !== 0x0a) || (cp >= 0x7f && cp <= 0x9f) ||
    cp === 0x2028 || cp === 0x2029 || (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069) ||
    cp === 0x200e || cp === 0x200f || cp === 0xfeff;
}

// escapeOutput decodes bytes as UTF-8 into segments [{text, esc}]: what
// is printable stays text; control characters (an ANSI escape's ESC
// among them) and bytes that are not UTF-8 become visible escapes such as
// \x1b, so that nothing a run printed can colour, move, reorder or hide
// what the console shows. Segments are text: they are never parsed as
// HTML.
export function escapeOutput(b) {
  const segs = [];
  let text = '';
  let esc = '';
  const flushText = () => { if (text) { segs.push({text, esc: false}); text = ''; } };
  const flushEsc = () => { if (esc) { segs.push({text: esc, esc: true}); esc = ''; } };
  const addText = (t) => { flushEsc(); text += t; };
  const addEsc = (t) => { flushText(); esc += t; };
  const n = b.length;
  let i = 0;
  while (i < n) {
    const c = b[i];
    if (c < 0x80) {
      if (c === 0x0d && b[i + 1] === 0x0a) addText('\n'), i += 2;
      else if (escapedCodePoint(c)) addEsc(c === 0x0d ? '\\r' : `\\x${hex2(c)}`), i++;
      else addText(String.fromCharCode(c)), i++;
      continue;
    }
    let len = 0;
    let cp = 0;
    let min = 0;
    if (c >= 0xc2 && c <= 0xdf) { len = 2; cp = c & 0x1f; min = 0x80; }
    else if (c >= 0xe0 && c <= 0xef) { len = 3; cp = c & 0x0f; min = 0x800; }
    else if (c >= 0xf0 && c <= 0xf4) { len = 4; cp = c & 0x07; min = 0x10000; }
    let ok = len > 0 && i + len <= n;
    for (let k = 1; ok && k < len; k++) {
      const cc = b[i + k];
      if ((cc & 0xc0) !== 0x80) ok = false;
      else cp = (cp << 6) | (cc & 0x3f);
    }
    if (!ok || cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      addEsc(`\\x${hex2(c)}`);
      i++;
      continue;
    }
    if (escapedCodePoint(cp)) addEsc(`\\u${cp.toString(16).padStart(4, '0')}`);
    else addText(String.fromCodePoint(cp));
    i += len;
  }
  flushText();
  flushEsc();
  return segs;
}

// outputNodes renders bytes as text nodes, escapes marked.
export function outputNodes(b) {
  return escapeOutput(b).map((sg) => (sg.esc ? h('span', {class: 'esc', title: 'escaped byte or control character'}, sg.text) : document.createTextNode(sg.text)));
}

// textNodes renders a string someone else chose (a label, an argument)
// as outputNodes does: control characters and bidirectional overrides
// shown as escapes.
export function textNodes(str) {
  return outputNodes(new TextEncoder().encode(String(str ?? '')));
}

// hexdump renders bytes as offset, hex and ASCII columns, at most max bytes.
export function hexdump(b, max = 64 * 1024) {
  const lines = [];
  const end = Math.min(b.length, max);
  for (let off = 0; off < end; off += 16) {
    const row = b.subarray(off, Math.min(off + 16, end));
    const hx = Array.from(row, hex2).join(' ').padEnd(47, ' ');
    const asc = Array.from(row, (c) => (c >= 0x20 && c < 0x7f ? String.fromCharCode(c) : '.')).join('');
    lines.push(`${off.toString(16).padStart(8, '0')}  ${hx}  ${asc}`);
  }
  if (b.length > end) lines.push(`… ${b.length - end} more bytes`);
  return lines.join('\n');
}

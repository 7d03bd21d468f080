// The nodes page, for admins: the gateways of the cluster (GET /v1/nodes),
// each with its state, heartbeat, Docker daemon, load and signing key.

import * as api from '../api.js';
import {h, fill, table} from '../dom.js';
import * as fmt from '../format.js';
import {badge} from './common.js';

function state(n) {
  return badge(n.state, n.state === 'alive' ? 'ok' : (n.state === 'lapsed' ? 'warn' : 'bad'));
}

function docker(n) {
  const where = n.docker_host || 'the local socket';
  return [badge(n.docker_healthy ? 'healthy' : 'unhealthy', n.docker_healthy ? 'ok' : 'bad'), ' ', h('span', {class: 'mono'}, where),
    n.docker_error ? h('div', {class: 'error-text'}, fmt.textNodes(n.docker_error)) : null];
}

export async function render(view) {
  const page = await api.getJSON('/v1/nodes');
  const nodes = page.nodes || [];
  fill(view, h('h1', null, 'Nodes'),
    h('p', {class: 'help'}, 'The gateways sharing this trail. A node that stops beating its heart lapses; a survivor then takes over its runs and closes its chain.'),
    table('Nodes, by name', [
      {label: 'Node', cell: (n) => [h('strong', null, n.name), n.self ? h('span', {class: 'muted'}, ' (this gateway)') : null]},
      {label: 'State', cell: (n) => [state(n), n.taken_over_by ? h('div', {class: 'muted'}, `taken over by ${n.taken_over_by} ${fmt.time(n.taken_over_at)}`) : null]},
      {label: 'Heartbeat', cell: (n) => `${fmt.duration(n.heartbeat_age_ms)} ago`},
      {label: 'Docker', cell: docker},
      {label: 'Runs', cell: (n) => `${n.running} of ${n.capacity}`, class: 'num'},
      {label: 'Key', cell: (n) => [h('span', {class: 'mono', title: n.public_key}, String(n.key_id || '').slice(0, 16)), n.key_registered ? '' : h('div', {class: 'error-text'}, 'not registered')]},
      {label: 'Version', cell: (n) => n.version},
    ], nodes, {hideCaption: true, empty: 'No node has registered.', class: 'nodes'}));
  return null;
}

// The cluster: masters (and the leader), workers with their slots and load.
// `dagr serve` is a single node: the API answers 404 there.

import { api } from '../api.js';
import { empty, errorBox, forbidden, h, loading, replace, table } from '../dom.js';

export async function render(ctx) {
  ctx.setTitle('Cluster');
  const body = h('div', null, loading('Loading the cluster'));
  const refresh = h('button', { type: 'button', class: 'secondary', id: 'cluster-refresh' }, 'Refresh');
  replace(ctx.main, h('div', { class: 'page-head' }, h('h1', null, 'Cluster'), h('div', { class: 'actions' }, refresh)), body);
  if (!ctx.session.admin) {
    // Only the installation's admin token may see the cluster; asking would only be refused.
    replace(body, h('p', { class: 'empty', id: 'cluster-forbidden' }, 'The cluster view needs the installation\'s admin token: sign in with it to see masters and workers.'));
    refresh.disabled = true;
    return null;
  }
  const load = async () => {
    try {
      const c = await api.get('/v1/cluster', null, ctx.signal);
      replace(body, c?.mode === 'node' ? single() : renderCluster(c));
    } catch (e) {
      if (e.name === 'AbortError') return;
      if (e.status === 404) replace(body, single());
      else if (e.status === 403) replace(body, forbidden(e, 'The cluster view'));
      else replace(body, errorBox(e));
    }
  };
  refresh.addEventListener('click', load);
  await load();
  const timer = setInterval(load, 10000);
  return { destroy: () => clearInterval(timer) };
}

function single() {
  return h('p', { id: 'cluster-single', class: 'empty' }, 'single node (dagr serve): no cluster.');
}

function renderCluster(c) {
  if (!c || typeof c !== 'object') return empty('No cluster information.');
  const scalars = Object.entries(c).filter(([, v]) => v === null || typeof v !== 'object');
  const lists = Object.entries(c).filter(([, v]) => Array.isArray(v));
  const objects = Object.entries(c).filter(([, v]) => v && typeof v === 'object' && !Array.isArray(v));
  return h('div', { id: 'cluster' },
    h('dl', { class: 'kv' }, scalars.flatMap(([k, v]) => [h('dt', null, k), h('dd', { 'data-key': k }, v === null ? '—' : String(v))])),
    objects.map(([k, v]) => [h('h2', null, k), genericTable([v], c.leader)]),
    lists.map(([k, v]) => [h('h2', null, `${k} (${v.length})`), v.length ? genericTable(v, c.leader) : empty(`No ${k}.`)]));
}

/** A table of whatever keys the entries have; the leader's row is marked. */
function genericTable(items, leader) {
  const keys = [];
  for (const item of items) {
    if (item && typeof item === 'object') for (const k of Object.keys(item)) if (!keys.includes(k)) keys.push(k);
  }
  if (!keys.length) return h('pre', null, items.map((i) => String(i)).join('\n'));
  return table(keys, items.map((item) => {
    const isLeader = leader != null && (item?.id === leader || item?.addr === leader);
    return h('tr', { 'data-id': item?.id != null ? String(item.id) : null, class: isLeader ? 'leader' : null },
      keys.map((k, i) => h('td', { class: typeof item?.[k] === 'number' ? 'num' : 'wrap' },
        cell(item?.[k]), i === 0 && isLeader ? h('strong', null, ' ★ leader') : null)));
  }));
}

function cell(v) {
  if (v === null || v === undefined) return '';
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { layout, edgePath, labelOf } from '../graph-layout.js';

const montagePath = fileURLToPath(new URL('../../../../tests/datasets/dags/pegasus-montage-dss-15d.json', import.meta.url));

function shuffled(items, seed = 7) {
  const out = items.slice();
  let s = seed;
  for (let i = out.length - 1; i > 0; i--) {
    s = (s * 1103515245 + 12345) % 2147483648;
    const j = s % (i + 1);
    [out[i], out[j]] = [out[j], out[i]];
  }
  return out;
}

function overlap(a, b) {
  return a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;
}

function checkLayout(result, ids, edges) {
  assert.equal(result.nodes.length, ids.length);
  for (const id of ids) assert.ok(result.index.has(id), id);
  // Every edge goes from a lower layer to a higher one, and left to right.
  for (const [from, to] of edges) {
    const a = result.nodes[result.index.get(from)];
    const b = result.nodes[result.index.get(to)];
    assert.ok(a.layer < b.layer, `${from} (layer ${a.layer}) -> ${to} (layer ${b.layer})`);
    assert.ok(a.x + a.width <= b.x, `${from} is not left of ${to}`);
  }
  // No two tasks of a layer overlap (nor any two tasks at all).
  const byLayer = new Map();
  for (const node of result.nodes) {
    if (!byLayer.has(node.layer)) byLayer.set(node.layer, []);
    byLayer.get(node.layer).push(node);
    assert.ok(Number.isFinite(node.x) && Number.isFinite(node.y), node.id);
    assert.ok(node.x >= 0 && node.y >= 0 && node.x + node.width <= result.width + 1e-6 &&
      node.y + node.height <= result.height + 1e-6, `${node.id} outside the drawing`);
  }
  for (const nodes of byLayer.values()) {
    const sorted = nodes.slice().sort((a, b) => a.x - b.x || a.y - b.y);
    for (let i = 1; i < sorted.length; i++) {
      const a = sorted[i - 1];
      const b = sorted[i];
      if (a.x === b.x) assert.ok(a.y + a.height <= b.y, `${a.id} overlaps ${b.id}`);
      else assert.ok(!overlap(a, b), `${a.id} overlaps ${b.id}`);
    }
  }
  const all = result.nodes.slice().sort((a, b) => a.x - b.x);
  for (let i = 0; i < all.length; i++) {
    for (let j = i + 1; j < all.length && all[j].x < all[i].x + all[i].width; j++) {
      assert.ok(!overlap(all[i], all[j]), `${all[i].id} overlaps ${all[j].id}`);
    }
  }
}

test('the montage DAG (2,122 tasks, 6,114 edges, shuffled) lays out in layers', () => {
  const data = JSON.parse(readFileSync(montagePath, 'utf8'));
  const tasks = shuffled(data.tasks);
  const ids = tasks.map((t) => t.id);
  const edges = tasks.flatMap((t) => t.deps.map((d) => [d, t.id]));
  assert.equal(ids.length, 2122);
  assert.equal(edges.length, 6114);
  const result = layout(ids, edges);
  checkLayout(result, ids, edges);
  assert.equal(result.edges.length, 6114);
  // Longest path: a task with no dependencies is in layer 0, others right after their deepest one.
  for (const t of tasks) {
    const node = result.nodes[result.index.get(t.id)];
    const deepest = Math.max(-1, ...t.deps.map((d) => result.nodes[result.index.get(d)].layer));
    assert.equal(node.layer, deepest + 1, t.id);
  }
  // Wide layers wrap: the drawing is not a thin strip.
  assert.ok(result.height < result.width * 4, `${result.width}x${result.height}`);
  assert.ok(edgePath(result).startsWith('M'));
});

test('a diamond: layers, order and a path per edge', () => {
  const ids = ['d', 'b', 'a', 'c'];
  const edges = [['a', 'b'], ['a', 'c'], ['b', 'd'], ['c', 'd'], ['a', 'a'], ['a', 'zz']];
  const result = layout(ids, edges);
  checkLayout(result, ids, edges.slice(0, 4));
  const layerOf = (id) => result.nodes[result.index.get(id)].layer;
  assert.deepEqual(['a', 'b', 'c', 'd'].map(layerOf), [0, 1, 1, 2]);
  assert.equal(result.edges.length, 4, 'the self-loop and the unknown task are left out');
  assert.equal((edgePath(result).match(/M/g) || []).length, 4);
});

test('a cycle does not hang the layout and every task is placed', () => {
  const result = layout(['a', 'b', 'c'], [['a', 'b'], ['b', 'c'], ['c', 'b']]);
  assert.equal(result.nodes.length, 3);
  assert.equal(result.nodes[result.index.get('a')].layer, 0);
  assert.ok(result.nodes.every((n) => Number.isFinite(n.x) && Number.isFinite(n.y)));
});

test('an empty graph and long labels', () => {
  const empty = layout([], []);
  assert.equal(empty.nodes.length, 0);
  assert.equal(labelOf('x'.repeat(100)).length, 32);
  assert.ok(labelOf('x'.repeat(100)).endsWith('…'));
});

test('barycenter ordering untangles a crossing', () => {
  // a1 -> b2 and a2 -> b1 cross in input order; the sweeps put b2 first.
  const result = layout(['a1', 'a2', 'b1', 'b2'], [['a1', 'b2'], ['a2', 'b1']]);
  const order = (id) => result.nodes[result.index.get(id)].order;
  assert.ok(order('b2') < order('b1'));
});

// A layered (Sugiyama-style) layout of a DAG, left to right. Pure: no DOM.
//
// 1. Layers: the longest path from a source (a task is one layer right of
//    its deepest dependency), so every edge goes from a lower layer to a
//    higher one.
// 2. Order within layers: a few barycenter sweeps (down, up, down) reduce
//    edge crossings.
// 3. Coordinates: layers are columns; a layer with very many tasks (the
//    montage DAG has layers of over a thousand) wraps into several columns
//    so that the picture keeps a usable shape; a layer of one column is
//    moved towards the middle of its dependencies.
//
// No dummy nodes for long edges: they are drawn as curves over the layers
// between (cheap, and fine for DAGs of thousands of tasks).

const DEFAULTS = {
  nodeHeight: 28,
  rowGap: 10,
  layerGap: 72,
  columnGap: 20,
  charWidth: 7,
  minWidth: 72,
  maxWidth: 240,
  maxLabel: 32,
  sweeps: 3,
  maxPerColumn: 0, // 0: chosen from the graph's size
};

export function labelOf(id, maxLabel = DEFAULTS.maxLabel) {
  const text = String(id);
  return text.length > maxLabel ? `${text.slice(0, maxLabel - 1)}…` : text;
}

/**
 * Lays out `ids` (task names) with `edges` (`[from, to]`: `to` depends on
 * `from`). Unknown ids in edges and self-loops are ignored. Answers
 * `{nodes: [{id, label, layer, order, x, y, width, height}], edges: [[i, j]],
 * index: Map(id → i), width, height, layers}`.
 */
export function layout(ids, edges, options = {}) {
  const o = { ...DEFAULTS, ...options };
  const n = ids.length;
  const index = new Map();
  ids.forEach((id, i) => index.set(id, i));
  const preds = Array.from({ length: n }, () => []);
  const succs = Array.from({ length: n }, () => []);
  const edgeList = [];
  for (const [from, to] of edges) {
    const a = index.get(from);
    const b = index.get(to);
    if (a === undefined || b === undefined || a === b) continue;
    preds[b].push(a);
    succs[a].push(b);
    edgeList.push([a, b]);
  }

  // 1. Longest-path layers (Kahn's order); a cycle's tasks go last.
  const layer = new Int32Array(n);
  const indegree = new Int32Array(n);
  for (let v = 0; v < n; v++) indegree[v] = preds[v].length;
  const queue = [];
  for (let v = 0; v < n; v++) if (indegree[v] === 0) queue.push(v);
  let seen = 0;
  for (let head = 0; head < queue.length; head++) {
    const v = queue[head];
    seen++;
    for (const w of succs[v]) {
      if (layer[v] + 1 > layer[w]) layer[w] = layer[v] + 1;
      if (--indegree[w] === 0) queue.push(w);
    }
  }
  let layerCount = 0;
  for (let v = 0; v < n; v++) if (indegree[v] === 0 && layer[v] + 1 > layerCount) layerCount = layer[v] + 1;
  if (seen < n) {
    for (let v = 0; v < n; v++) if (indegree[v] > 0) layer[v] = layerCount;
    layerCount++;
  }
  const layers = Array.from({ length: layerCount }, () => []);
  for (let v = 0; v < n; v++) layers[layer[v]].push(v);

  // 2. Barycenter ordering; positions are relative (0..1) so that layers of
  //    different sizes compare.
  const pos = new Float64Array(n);
  const setPositions = (members) => {
    const size = members.length;
    members.forEach((v, i) => { pos[v] = (i + 0.5) / size; });
  };
  layers.forEach(setPositions);
  const bary = new Float64Array(n);
  const sweep = (members, neighbours) => {
    for (const v of members) {
      const ns = neighbours[v];
      if (ns.length === 0) {
        bary[v] = pos[v];
        continue;
      }
      let sum = 0;
      for (const w of ns) sum += pos[w];
      bary[v] = sum / ns.length;
    }
    members.sort((a, b) => bary[a] - bary[b] || pos[a] - pos[b]);
    setPositions(members);
  };
  for (let s = 0; s < o.sweeps; s++) {
    if (s % 2 === 0) for (let l = 1; l < layerCount; l++) sweep(layers[l], preds);
    else for (let l = layerCount - 2; l >= 0; l--) sweep(layers[l], succs);
  }

  // 3. Coordinates.
  const maxPerColumn = o.maxPerColumn > 0 ? o.maxPerColumn : Math.max(40, Math.ceil(Math.sqrt(n) * 1.6));
  const pitch = o.nodeHeight + o.rowGap;
  const label = new Array(n);
  const width = new Float64Array(n);
  for (let v = 0; v < n; v++) {
    label[v] = labelOf(ids[v], o.maxLabel);
    width[v] = Math.min(o.maxWidth, Math.max(o.minWidth, label[v].length * o.charWidth + 34));
  }
  const shape = layers.map((members) => {
    const columns = Math.max(1, Math.ceil(members.length / maxPerColumn));
    return { columns, rows: Math.ceil(members.length / columns) };
  });
  const maxRows = Math.max(1, ...shape.map((sh) => sh.rows));
  const x = new Float64Array(n);
  const y = new Float64Array(n);
  const order = new Int32Array(n);
  let left = 0;
  layers.forEach((members, l) => {
    const { columns, rows } = shape[l];
    members.forEach((v, i) => { order[v] = i; });
    for (let c = 0; c < columns; c++) {
      const column = members.slice(c * rows, (c + 1) * rows);
      let colWidth = 0;
      for (const v of column) colWidth = Math.max(colWidth, width[v]);
      const top = ((maxRows - column.length) * pitch) / 2;
      column.forEach((v, r) => {
        x[v] = left;
        y[v] = top + r * pitch;
      });
      if (columns === 1 && l > 0) alignToDependencies(column, preds, y, pitch);
      left += colWidth + (c < columns - 1 ? o.columnGap : o.layerGap);
    }
  });
  let minY = Infinity;
  let maxY = -Infinity;
  let maxX = 0;
  for (let v = 0; v < n; v++) {
    if (y[v] < minY) minY = y[v];
    if (y[v] > maxY) maxY = y[v];
    if (x[v] + width[v] > maxX) maxX = x[v] + width[v];
  }
  if (n === 0) minY = maxY = 0;
  const nodes = new Array(n);
  for (let v = 0; v < n; v++) {
    nodes[v] = {
      id: ids[v], label: label[v], layer: layer[v], order: order[v],
      x: x[v], y: y[v] - minY, width: width[v], height: o.nodeHeight,
    };
  }
  return { nodes, edges: edgeList, index, width: maxX, height: maxY - minY + o.nodeHeight, layers: layerCount };
}

/** Moves a one-column layer towards its dependencies, keeping its order and spacing. */
function alignToDependencies(column, preds, y, pitch) {
  const desired = column.map((v) => {
    const ps = preds[v];
    if (!ps.length) return y[v];
    let sum = 0;
    for (const p of ps) sum += y[p];
    return sum / ps.length;
  });
  // Forward: at least one pitch below the previous task.
  const placed = new Float64Array(column.length);
  for (let i = 0; i < column.length; i++) {
    placed[i] = i === 0 ? desired[0] : Math.max(desired[i], placed[i - 1] + pitch);
  }
  // Then the whole column by the mean of what it was pushed.
  let push = 0;
  for (let i = 0; i < column.length; i++) push += placed[i] - desired[i];
  const shift = push / column.length;
  column.forEach((v, i) => { y[v] = placed[i] - shift; });
}

/** An SVG path (`d`) of all edges, as curves from a task's right side to its dependant's left. */
export function edgePath(result, only) {
  const parts = [];
  const { nodes } = result;
  const list = only ?? result.edges;
  for (const [a, b] of list) {
    const p = nodes[a];
    const q = nodes[b];
    const x1 = p.x + p.width;
    const y1 = p.y + p.height / 2;
    const x2 = q.x;
    const y2 = q.y + q.height / 2;
    const dx = Math.max(24, (x2 - x1) / 2);
    parts.push(`M${r(x1)} ${r(y1)}C${r(x1 + dx)} ${r(y1)} ${r(x2 - dx)} ${r(y2)} ${r(x2)} ${r(y2)}`);
  }
  return parts.join('');
}

const r = (v) => Math.round(v * 10) / 10;

// A line diff (Myers' O((N+M)D) algorithm) and its grouping into hunks with
// context, for comparing two versions of a definition. Pure.

/** Edits turning `a` into `b`: `[{op: ' ' | '-' | '+', text}]`, a shortest one. */
export function diffLines(a, b, { maxEdits = 4000 } = {}) {
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  let endA = a.length;
  let endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) {
    endA--;
    endB--;
  }
  const head = a.slice(0, start).map((text) => ({ op: ' ', text }));
  const tail = a.slice(endA).map((text) => ({ op: ' ', text }));
  const middle = myers(a.slice(start, endA), b.slice(start, endB), maxEdits);
  return [...head, ...middle, ...tail];
}

function myers(a, b, maxEdits) {
  const n = a.length;
  const m = b.length;
  if (n === 0) return b.map((text) => ({ op: '+', text }));
  if (m === 0) return a.map((text) => ({ op: '-', text }));
  const max = n + m;
  const off = max + 1;
  const v = new Int32Array(2 * max + 3);
  const trace = [];
  for (let d = 0; d <= max; d++) {
    if (d > maxEdits) {
      // Too different to be worth a shortest diff: all out, all in.
      return [...a.map((text) => ({ op: '-', text })), ...b.map((text) => ({ op: '+', text }))];
    }
    trace.push(v.slice(off - d - 1, off + d + 2));
    for (let k = -d; k <= d; k += 2) {
      let x = k === -d || (k !== d && v[off + k - 1] < v[off + k + 1]) ? v[off + k + 1] : v[off + k - 1] + 1;
      let y = x - k;
      while (x < n && y < m && a[x] === b[y]) {
        x++;
        y++;
      }
      v[off + k] = x;
      if (x >= n && y >= m) return backtrack(a, b, trace, d);
    }
  }
  return [];
}

function backtrack(a, b, trace, last) {
  const out = [];
  let x = a.length;
  let y = b.length;
  for (let d = last; d >= 0; d--) {
    const snap = trace[d];
    const at = (k) => snap[k + d + 1];
    const k = x - y;
    let prevK;
    if (d === 0) prevK = 0;
    else prevK = k === -d || (k !== d && at(k - 1) < at(k + 1)) ? k + 1 : k - 1;
    const prevX = d === 0 ? 0 : at(prevK);
    const prevY = prevX - prevK;
    while (x > prevX && y > prevY) {
      out.push({ op: ' ', text: a[x - 1] });
      x--;
      y--;
    }
    if (d > 0) {
      if (x === prevX) {
        out.push({ op: '+', text: b[y - 1] });
        y--;
      } else {
        out.push({ op: '-', text: a[x - 1] });
        x--;
      }
    }
  }
  return out.reverse();
}

/**
 * The edits with unchanged stretches longer than 2 × `context` folded:
 * `[{op, text} | {gap: count}]`.
 */
export function hunks(edits, context = 3) {
  const out = [];
  let i = 0;
  while (i < edits.length) {
    if (edits[i].op !== ' ') {
      out.push(edits[i]);
      i++;
      continue;
    }
    let j = i;
    while (j < edits.length && edits[j].op === ' ') j++;
    const run = edits.slice(i, j);
    const first = i === 0;
    const lastRun = j === edits.length;
    const keepBefore = first ? 0 : context;
    const keepAfter = lastRun ? 0 : context;
    if (run.length > keepBefore + keepAfter + 1) {
      out.push(...run.slice(0, keepBefore));
      out.push({ gap: run.length - keepBefore - keepAfter });
      out.push(...run.slice(run.length - keepAfter));
    } else {
      out.push(...run);
    }
    i = j;
  }
  return out;
}

// A JSON Schema (a plugin's params) as rows of documentation: one row per
// field, nested objects and array items included. Pure.

const MAX_DEPTH = 8;

/** `[{path, depth, type, required, default?, description, enum?}]`. */
export function schemaRows(schema) {
  const rows = [];
  if (!schema || typeof schema !== 'object') return rows;
  walkObject(schema, schema, '', 0, rows, new Set());
  return rows;
}

function resolve(root, node, seen) {
  let current = node;
  for (let i = 0; i < 10 && current && typeof current.$ref === 'string'; i++) {
    const ref = current.$ref;
    if (!ref.startsWith('#/') || seen.has(ref)) return { ...current, $ref: undefined, type: current.type ?? `see ${ref}` };
    let target = root;
    for (const part of ref.slice(2).split('/')) {
      target = target?.[part.replace(/~1/g, '/').replace(/~0/g, '~')];
    }
    if (!target) return { type: `unresolved ${ref}` };
    current = { ...target, ...withoutRef(current) };
  }
  return current ?? {};
}

function withoutRef(node) {
  const { $ref, ...rest } = node;
  return rest;
}

/** The type of a schema node, as text. */
export function typeOf(node) {
  if (!node || typeof node !== 'object') return 'any';
  if (Array.isArray(node.type)) return node.type.join(' | ');
  if (node.type === 'array') {
    const items = node.items && !Array.isArray(node.items) ? typeOf(node.items) : 'any';
    return `array of ${items}`;
  }
  if (node.type) return String(node.type);
  const alts = node.oneOf ?? node.anyOf;
  if (Array.isArray(alts)) return alts.map(typeOf).join(' | ');
  if (node.enum) return 'enum';
  if (node.const !== undefined) return `const ${JSON.stringify(node.const)}`;
  if (node.properties) return 'object';
  return 'any';
}

function walkObject(root, node, prefix, depth, rows, seen) {
  const resolved = resolve(root, node, seen);
  if (depth > MAX_DEPTH) return;
  const required = new Set(Array.isArray(resolved.required) ? resolved.required : []);
  const props = resolved.properties && typeof resolved.properties === 'object' ? resolved.properties : {};
  for (const [name, raw] of Object.entries(props)) {
    const path = prefix ? `${prefix}.${name}` : name;
    const refKey = raw && typeof raw.$ref === 'string' ? raw.$ref : null;
    const child = resolve(root, raw ?? {}, seen);
    rows.push(row(path, depth, child, required.has(name)));
    const nextSeen = refKey ? new Set([...seen, refKey]) : seen;
    if (refKey && seen.has(refKey)) continue;
    if (child.properties) walkObject(root, child, path, depth + 1, rows, nextSeen);
    const items = child.type === 'array' && child.items && !Array.isArray(child.items) ? resolve(root, child.items, seen) : null;
    if (items?.properties) walkObject(root, items, `${path}[]`, depth + 1, rows, nextSeen);
    if (child.additionalProperties && typeof child.additionalProperties === 'object') {
      const extra = resolve(root, child.additionalProperties, seen);
      rows.push(row(`${path}.*`, depth + 1, extra, false));
      if (extra.properties) walkObject(root, extra, `${path}.*`, depth + 2, rows, nextSeen);
    }
  }
}

function row(path, depth, node, required) {
  const out = {
    path,
    depth,
    type: typeOf(node),
    required,
    description: [node.title, node.description].filter(Boolean).join(': '),
  };
  if (node.default !== undefined) out.default = node.default;
  if (Array.isArray(node.enum)) out.enum = node.enum;
  const limits = [];
  for (const [key, label] of [['minimum', '≥'], ['maximum', '≤'], ['minLength', 'min length'], ['maxLength', 'max length'], ['pattern', 'pattern'], ['format', 'format']]) {
    if (node[key] !== undefined) limits.push(`${label} ${node[key]}`);
  }
  if (limits.length) out.limits = limits.join(', ');
  return out;
}

// The JSON Schema subset the SDK checks params against: type (one or a list),
// properties, required, additionalProperties, items, enum, const, minimum,
// maximum, minLength, maxLength, minItems, maxItems, anyOf. The same schema
// is what `describe` returns, so dagr checks workflows' params against it
// when they are applied; this check catches what templates render at run time.

const kindOf = (value) => {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  if (Number.isInteger(value)) return 'integer';
  return typeof value;
};

const article = (kind) => (/^[aeiou]/.test(kind) ? `an ${kind}` : `a ${kind}`);

const fits = (kind, type) => type === kind || (type === 'number' && kind === 'integer');

const join = (path, key) =>
  typeof key === 'number' ? `${path}[${key}]` : path ? `${path}.${key}` : String(key);

/**
 * The first place where `value` does not fit `schema`, as `{ path, message }`,
 * or null when it fits.
 */
export function check(schema, value, path = '') {
  if (schema === true || schema === undefined || schema === null) return null;
  if (schema === false) return { path, message: 'no value is allowed here' };
  const kind = kindOf(value);
  if (schema.anyOf) {
    if (!schema.anyOf.some((s) => check(s, value, path) === null)) {
      return { path, message: `${article(kind)} fits none of the allowed shapes` };
    }
  }
  if (schema.type !== undefined) {
    const types = Array.isArray(schema.type) ? schema.type : [schema.type];
    if (!types.some((t) => fits(kind, t))) {
      return { path, message: `expected ${types.map(article).join(' or ')}, got ${article(kind === 'integer' ? 'number' : kind)}` };
    }
  }
  if (schema.enum && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value))) {
    return { path, message: `expected one of ${schema.enum.map((e) => JSON.stringify(e)).join(', ')}, got ${JSON.stringify(value)}` };
  }
  if ('const' in schema && JSON.stringify(schema.const) !== JSON.stringify(value)) {
    return { path, message: `expected ${JSON.stringify(schema.const)}` };
  }
  if (kind === 'integer' || kind === 'number') {
    if (schema.minimum !== undefined && value < schema.minimum) return { path, message: `must be at least ${schema.minimum}` };
    if (schema.maximum !== undefined && value > schema.maximum) return { path, message: `must be at most ${schema.maximum}` };
  }
  if (kind === 'string') {
    if (schema.minLength !== undefined && value.length < schema.minLength) return { path, message: `must be at least ${schema.minLength} characters long` };
    if (schema.maxLength !== undefined && value.length > schema.maxLength) return { path, message: `must be at most ${schema.maxLength} characters long` };
  }
  if (kind === 'array') {
    if (schema.minItems !== undefined && value.length < schema.minItems) return { path, message: `must have at least ${schema.minItems} items` };
    if (schema.maxItems !== undefined && value.length > schema.maxItems) return { path, message: `must have at most ${schema.maxItems} items` };
    if (schema.items !== undefined) {
      for (let i = 0; i < value.length; i++) {
        const found = check(schema.items, value[i], join(path, i));
        if (found) return found;
      }
    }
  }
  if (kind === 'object') {
    const properties = schema.properties || {};
    for (const name of schema.required || []) {
      if (!(name in value)) return { path: join(path, name), message: 'missing field' };
    }
    for (const [key, item] of Object.entries(value)) {
      if (key in properties) {
        const found = check(properties[key], item, join(path, key));
        if (found) return found;
      } else if (schema.additionalProperties === false) {
        const known = Object.keys(properties).sort().join(', ') || 'none';
        return { path: join(path, key), message: `unknown field (known fields: ${known})` };
      } else if (typeof schema.additionalProperties === 'object') {
        const found = check(schema.additionalProperties, item, join(path, key));
        if (found) return found;
      }
    }
  }
  return null;
}

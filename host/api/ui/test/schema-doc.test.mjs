import { test } from 'node:test';
import assert from 'node:assert/strict';
import { schemaRows, typeOf } from '../schema-doc.js';

test('fields with type, required, default and description, nested objects recursively', () => {
  const schema = {
    type: 'object',
    required: ['url'],
    properties: {
      url: { type: 'string', description: 'Where to send it', format: 'uri' },
      retries: { type: 'integer', default: 3, minimum: 0 },
      headers: { type: 'object', additionalProperties: { type: 'string' } },
      auth: {
        type: 'object', required: ['user'],
        properties: { user: { type: 'string' }, password: { type: ['string', 'null'] } },
      },
      items: { type: 'array', items: { type: 'object', properties: { id: { type: 'integer' } } } },
      mode: { enum: ['a', 'b'] },
    },
  };
  const rows = schemaRows(schema);
  const by = Object.fromEntries(rows.map((r) => [r.path, r]));
  assert.deepEqual(rows.map((r) => r.path),
    ['url', 'retries', 'headers', 'headers.*', 'auth', 'auth.user', 'auth.password', 'items', 'items[].id', 'mode']);
  assert.equal(by.url.required, true);
  assert.equal(by.url.description, 'Where to send it');
  assert.equal(by.url.limits, 'format uri');
  assert.equal(by.retries.default, 3);
  assert.equal(by.retries.required, false);
  assert.equal(by['auth.user'].required, true);
  assert.equal(by['auth.user'].depth, 1);
  assert.equal(by['auth.password'].type, 'string | null');
  assert.equal(by.items.type, 'array of object');
  assert.deepEqual(by.mode.enum, ['a', 'b']);
});

test('local $refs resolve, and a recursive schema ends', () => {
  const schema = {
    $defs: { node: { type: 'object', properties: { name: { type: 'string' }, child: { $ref: '#/$defs/node' } } } },
    type: 'object',
    properties: { root: { $ref: '#/$defs/node' } },
  };
  const rows = schemaRows(schema);
  assert.ok(rows.some((r) => r.path === 'root.name' && r.type === 'string'));
  assert.ok(rows.length < 50, `${rows.length} rows`);
});

test('no schema, odd schemas', () => {
  assert.deepEqual(schemaRows(null), []);
  assert.deepEqual(schemaRows({ type: 'object' }), []);
  assert.equal(typeOf({ oneOf: [{ type: 'string' }, { type: 'number' }] }), 'string | number');
  assert.equal(typeOf({}), 'any');
});

// The UI's sources keep to the rules the Content-Security-Policy and
// hostile content impose: no HTML from strings, no eval, no inline script,
// style or handler; every import names something its module exports.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));

function files(dir = root) {
  const out = [];
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (name === 'test') continue;
    if (statSync(path).isDirectory()) out.push(...files(path));
    else out.push(path);
  }
  return out;
}

const sources = files().filter((f) => f.endsWith('.js'));

test('no HTML parsing of strings, no eval, no inline styles, no token storage', () => {
  const banned = [
    /\.innerHTML\s*=/, /\.outerHTML\s*=/, /insertAdjacentHTML/, /document\.write/, /\beval\(/, /new Function\(/,
    /setAttribute\(\s*['"]style/, /localStorage/, /sessionStorage/, /\balert\(/, /\.src\s*=\s*[a-z]/, /console\.log/,
  ];
  for (const file of sources) {
    const text = readFileSync(file, 'utf8');
    for (const pattern of banned) assert.ok(!pattern.test(text), `${relative(root, file)} matches ${pattern}`);
  }
});

test('the shell has no inline script, style or handler', () => {
  const html = readFileSync(join(root, 'index.html'), 'utf8');
  assert.ok(!/<script(?![^>]*\bsrc=)/i.test(html), 'an inline <script>');
  assert.ok(!/<style/i.test(html), 'an inline <style>');
  assert.ok(!/\sstyle=/i.test(html), 'a style attribute');
  assert.ok(!/\son[a-z]+=/i.test(html), 'an inline handler');
  assert.match(html, /<script type="module" src="\/ui\/assets\/app\.js"><\/script>/);
});

test('every named import is exported by its module', () => {
  for (const file of sources) {
    const text = readFileSync(file, 'utf8');
    for (const m of text.matchAll(/import \{([^}]+)\} from '([^']+)'/g)) {
      const target = join(dirname(file), m[2]);
      const exported = readFileSync(target, 'utf8');
      for (const name of m[1].split(',').map((s) => s.trim()).filter(Boolean)) {
        const declared = new RegExp(`export (async )?(function|const|class|let) ${name}\\b`).test(exported) ||
          new RegExp(`export \\{[^}]*\\b${name}\\b`).test(exported);
        assert.ok(declared, `${relative(root, file)} imports ${name} from ${m[2]}, which does not export it`);
      }
    }
    for (const m of text.matchAll(/import\('([^']+)'\)/g)) {
      assert.ok(statSync(join(dirname(file), m[1])).isFile(), `${relative(root, file)} loads ${m[1]}`);
    }
  }
});

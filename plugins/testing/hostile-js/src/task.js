// The hostile cases of plugins/testing, in JavaScript: a task that
// misbehaves the way its `case` param says. The test suite
// (tests/all/polyglot.rs) checks that dagr contains each one exactly as it
// contains the Rust components.
import * as dagr from '@dagr/sdk';

function recurse(n) {
  return recurse(n + 1) + 1;
}

async function attempt(what) {
  try {
    const response = await what();
    return { ok: true, status: response.status };
  } catch (e) {
    return { ok: false, error: String(e) };
  }
}

export default dagr.defineTask({
  name: 'hostile-js',
  version: '0.1.0',
  description: 'Misbehaves on purpose (tests only).',
  async run(ctx, params) {
    switch (params.case) {
      case 'iloop':
        for (;;) {}
      case 'membomb': {
        const hoard = [];
        for (;;) hoard.push(new Uint8Array(8 << 20).fill(1));
      }
      case 'escape':
        // StarlingMonkey has no file API at all; the nearest things to one:
        return {
          globals: { require: typeof globalThis.require, process: typeof globalThis.process, Deno: typeof globalThis.Deno },
          file: await attempt(() => fetch('file:///etc/passwd')),
        };
      case 'network':
        return { fetch: await attempt(() => fetch(params.url)) };
      case 'bigoutput':
        return { data: 'x'.repeat(4 << 20) };
      case 'biglog':
        for (let i = 0; i < 20000; i++) {
          dagr.info(`log line ${i} ${'y'.repeat(64)}`);
          console.log(`stdout line ${i}`);
        }
        return { done: true };
      case 'raise':
        throw new TypeError('hostile on purpose');
      case 'recurse':
        return recurse(0);
      case 'secret': {
        const value = dagr.secret('token');
        console.log(`the token is ${value}`);
        return { token: value };
      }
      default:
        throw new dagr.Fatal(`unknown case ${JSON.stringify(params.case)}`);
    }
  },
});

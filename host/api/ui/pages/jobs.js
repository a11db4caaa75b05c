// Ad-hoc jobs: one plugin with params, run now; with "wait", its output.

import { api, request } from '../api.js';
import { errorBox, field, h, links, pretty, replace, runLink, badge } from '../dom.js';

export async function render(ctx) {
  ctx.setTitle('Jobs');
  const plugin = h('select', { id: 'job-plugin', required: true }, h('option', { value: '' }, 'Loading plugins…'));
  const name = h('input', { type: 'text', id: 'job-name', placeholder: 'job', spellcheck: 'false', autocomplete: 'off' });
  const timeout = h('input', { type: 'text', id: 'job-timeout', placeholder: 'e.g. 30s', spellcheck: 'false', autocomplete: 'off' });
  const params = h('textarea', { id: 'job-params', rows: 8, spellcheck: 'false' }, '{}');
  const wait = h('input', { type: 'checkbox', id: 'job-wait', checked: true });
  const submit = h('button', { type: 'submit', id: 'job-submit' }, '► Run job');
  const schemaHint = h('div', { class: 'hint', id: 'job-plugin-info' });
  const result = h('div', { id: 'job-result' });
  const form = h('form', { class: 'card', novalidate: true },
    h('div', { class: 'row' }, field('Plugin', plugin), field('Name (shown as its workflow)', name), field('Attempt timeout', timeout)),
    schemaHint,
    field('Params (JSON)', params),
    h('div', { class: 'field inline' }, wait, h('label', { for: 'job-wait' }, 'Wait for the outcome (up to 60 s) and show the output')),
    submit);
  replace(ctx.main, h('h1', null, 'Run a job'),
    h('p', { class: 'muted' }, 'A job runs one plugin once, without a registered workflow.'), form, result);

  let plugins = [];
  try {
    plugins = await api.get('/v1/plugins', null, ctx.signal);
  } catch (e) {
    if (e.name === 'AbortError') return null;
    replace(plugin, h('option', { value: '' }, 'cannot list plugins'));
    replace(result, errorBox(e));
  }
  const names = [...new Set(plugins.map((p) => p.name))].sort();
  if (plugins.length) {
    replace(plugin, h('option', { value: '' }, 'choose a plugin'),
      names.map((n) => h('option', { value: n, selected: n === ctx.query.get('plugin') }, n)));
  }
  const describe = () => {
    const versions = plugins.filter((p) => p.name === plugin.value);
    const latest = versions[versions.length - 1];
    replace(schemaHint, latest
      ? [latest.description || '', ' ', h('a', { href: links.plugin(latest.name) }, 'params documentation')]
      : []);
  };
  plugin.addEventListener('change', describe);
  describe();

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    replace(result);
    if (!plugin.value) {
      replace(result, errorBox({ message: 'Choose a plugin.' }));
      plugin.focus();
      return;
    }
    let value;
    try {
      value = params.value.trim() ? JSON.parse(params.value) : {};
    } catch (err) {
      replace(result, errorBox({ message: `The params are not JSON: ${err.message}`, location: 'params' }));
      params.focus();
      return;
    }
    const body = { plugin: plugin.value, params: value };
    if (name.value.trim()) body.name = name.value.trim();
    if (timeout.value.trim()) body.timeout = timeout.value.trim();
    submit.disabled = true;
    replace(result, h('p', { class: 'loading', role: 'status' }, wait.checked ? 'Running, waiting for the outcome…' : 'Submitting…'));
    try {
      const query = wait.checked ? { wait: 'true', wait_timeout: '60s' } : undefined;
      const { status, data } = await request('POST', '/v1/jobs', { body, query, signal: ctx.signal });
      replace(result, jobResult(status, data));
    } catch (err) {
      if (err.name !== 'AbortError') replace(result, errorBox(err));
    } finally {
      submit.disabled = false;
    }
  });
  return null;
}

function jobResult(status, job) {
  const hasOutput = job.output !== undefined && job.output !== null;
  const errors = job.errors && Object.keys(job.errors).length ? job.errors : null;
  return h('section', { class: 'card' },
    h('h2', null, 'Job ', runLink(job.run_id, { id: 'job-run-link' }), ' ', badge(job.state, { id: 'job-state' })),
    status === 202 ? h('p', { class: 'warning' }, 'Still running when the wait ended: follow it on its run page.') : null,
    status === 201 ? h('p', { class: 'muted' }, 'Submitted. Its output will be on its run page.') : null,
    h('h3', null, 'Output'),
    h('pre', { id: 'job-output' }, hasOutput ? pretty(job.output)
      : job.outputs && Object.keys(job.outputs).length ? pretty(job.outputs) : '(no output)'),
    errors ? [h('h3', null, 'Errors'), h('pre', { id: 'job-errors', class: 'error' }, pretty(errors))] : null);
}

// The panel of one task of a run: state, attempts, failure, output,
// progress, the selected attempt's log streamed live, and the task actions.

import { ApiError, api, request, streamNdjson, v1 } from './api.js';
import { kv } from './components.js';
import { confirmDialog } from './dialog.js';
import { badge, debounce, duration, empty, errorBox, h, pretty, replace, table, timeEl } from './dom.js';
import { formatLogLine, progressFromLine } from './lines.js';

const TERMINAL_TASK = new Set(['succeeded', 'failed', 'upstream_failed', 'skipped', 'killed']);
const MAX_LOG_LINES = 20000;

/**
 * Opens the panel of `task` of run `runId`. `onClose()` when the user closes
 * it; `onChanged()` after an action. Answers `{el, show(task), refresh(), destroy()}`.
 */
export function taskPanel({ runId, onClose, onChanged }) {
  const title = h('h2', { id: 'task-panel-title', tabindex: '-1' });
  const closeButton = h('button', { type: 'button', class: 'secondary small close', id: 'task-panel-close', 'aria-label': 'Close the task panel' }, '✕ Close');
  const stateBox = h('span', { id: 'task-state-box' });
  const body = h('div', null);
  const el = h('aside', { id: 'task-panel', class: 'task-panel', 'aria-labelledby': 'task-panel-title' },
    h('header', null, title, stateBox, closeButton), body);
  // Esc closes it too: the run page listens for it.
  closeButton.addEventListener('click', () => onClose());

  let task = null;
  let detail = null;
  let loadSeq = 0;
  let log = null; // {attempt, abort, latest}
  let selectedAttempt = null; // null: follow the latest

  // Parts that stay across refreshes (the log must not be rebuilt).
  const info = h('div', null);
  const failure = h('div', { id: 'task-failure' });
  const progressBar = h('progress', { id: 'task-progress', max: '100', 'aria-labelledby': 'task-progress-label' });
  const progressText = h('span', { id: 'task-progress-message' });
  const progressBox = h('div', { class: 'progress', hidden: true },
    h('h3', { id: 'task-progress-label' }, 'Progress'), progressBar, progressText);
  const attempts = h('div', { id: 'task-attempts' });
  const output = h('pre', { id: 'task-output' });
  const attemptSelect = h('select', { id: 'task-attempt', 'aria-label': 'Attempt whose log is shown' });
  const logStatus = h('span', { class: 'muted', id: 'task-log-status', role: 'status' });
  const logPre = h('pre', { id: 'task-log', tabindex: '0', 'aria-label': 'Log', 'aria-live': 'off' });
  const downstream = h('input', { type: 'checkbox', id: 'rerun-downstream' });
  const rerun = h('button', { type: 'button', id: 'action-task-rerun', class: 'secondary' }, '↻ Rerun task');
  const force = h('button', { type: 'button', id: 'action-force-success', class: 'secondary' }, '✓ Force success');
  const actionResult = h('div', { id: 'task-action-result', role: 'status' });
  let logLines = 0;
  let lineProgress = null; // from `progress` log lines, when the API gives none

  replace(body,
    info, failure, progressBox,
    h('div', { class: 'toolbar' }, rerun, h('label', { class: 'field inline' }, downstream, 'with downstream'), force),
    actionResult,
    h('div', { class: 'toolbar' }, h('h3', null, 'Log'), attemptSelect, logStatus),
    logPre,
    h('h3', null, 'Output'), output,
    h('h3', null, 'Attempts'), attempts);

  attemptSelect.addEventListener('change', () => {
    const n = Number(attemptSelect.value);
    const latest = detail?.attempts ?? 0;
    selectedAttempt = n >= latest ? null : n;
    startLog(n, n >= latest);
  });

  rerun.addEventListener('click', async () => {
    const withDown = downstream.checked;
    const ok = await confirmDialog({
      title: 'Rerun task',
      message: `Rerun task "${task}"${withDown ? ' and everything downstream of it' : ''}?`,
      confirmLabel: 'Rerun',
    });
    if (ok) act(`${v1('runs', runId, 'tasks', task)}/rerun`, { downstream: withDown });
  });
  force.addEventListener('click', async () => {
    const ok = await confirmDialog({
      title: 'Force success',
      message: `Mark task "${task}" succeeded, so that what depends on it can go on?`,
      confirmLabel: 'Force success',
      danger: true,
    });
    if (ok) act(`${v1('runs', runId, 'tasks', task)}/force-success`);
  });

  async function act(path, body) {
    replace(actionResult, h('p', { class: 'loading' }, 'Sending…'));
    try {
      const { status, data } = await request('POST', path, { body });
      const text = status === 202 ? `accepted: ${data.message}` : `ok: ${data.message || 'done'}`;
      replace(actionResult, h('p', { class: 'ok' }, text));
      onChanged?.();
      refresh();
    } catch (e) {
      replace(actionResult, e instanceof ApiError && e.status === 409
        ? h('p', { class: 'error' }, `refused: ${e.message}`)
        : errorBox(e));
    }
  }

  function renderDetail(d) {
    replace(title, d.name);
    replace(stateBox, badge(d.state, { id: 'task-state' }));
    replace(info, kv([
      ['Plugin', d.plugin || '—'],
      ['Attempts', `${d.attempts} (${d.failures} failed)${d.forced ? ' · forced' : ''}`],
      ['Depends on', d.depends_on?.length ? d.depends_on.join(', ') : 'nothing'],
      ['Started', d.started_at ? timeEl(d.started_at) : null],
      ['Finished', d.finished_at ? timeEl(d.finished_at) : null],
      ['Duration', d.started_at ? duration(d.started_at, d.finished_at) : null],
      ['Retry at', d.retry_at ? timeEl(d.retry_at) : null],
    ]));
    const lastFailed = [...(d.attempts_detail ?? [])].reverse().find((a) => a.state === 'failed');
    const reason = d.error || lastFailed?.message;
    replace(failure, reason
      ? h('div', { class: 'error', id: 'task-error' },
        h('strong', null, `Why it ${d.state === 'succeeded' ? 'failed before' : 'failed'}: `),
        lastFailed?.failure_kind ? `[${lastFailed.failure_kind}] ` : '', reason)
      : null);
    setProgress(d.progress ?? lineProgress);
    const list = d.attempts_detail ?? [];
    replace(attempts, list.length
      ? table(['#', 'State', 'Failure', 'Message', 'Worker', 'Started', 'Ended'], list.map((a) => h('tr', { 'data-attempt': String(a.number) },
        h('td', { class: 'num' }, String(a.number)), h('td', null, badge(a.state)), h('td', null, a.failure_kind ?? ''),
        h('td', { class: 'wrap' }, a.message ?? ''), h('td', { class: 'mono' }, a.worker ?? ''),
        h('td', null, timeEl(a.started_at)), h('td', null, timeEl(a.finished_at)))))
      : empty('No attempt yet.'));
    output.textContent = d.output === undefined || d.output === null ? '(no output)' : pretty(d.output);
    // The attempt picker: every attempt, the latest selected unless the user chose one.
    const count = Math.max(1, d.attempts);
    const options = [];
    for (let n = count; n >= 1; n--) options.push(h('option', { value: String(n) }, `attempt ${n}${n === count ? ' (latest)' : ''}`));
    replace(attemptSelect, options);
    attemptSelect.value = String(selectedAttempt ?? count);
    rerun.disabled = !TERMINAL_TASK.has(d.state);
  }

  function setProgress(p) {
    if (!p) {
      progressBox.hidden = true;
      return;
    }
    progressBox.hidden = false;
    const percent = Math.max(0, Math.min(100, Number(p.percent) || 0));
    progressBar.value = percent;
    progressBar.textContent = `${percent}%`;
    progressText.textContent = `${percent}%${p.message ? ` · ${p.message}` : ''}`;
  }

  function startLog(attempt, latest) {
    log?.abort.abort();
    logPre.textContent = '';
    logLines = 0;
    lineProgress = null;
    const state = detail?.state;
    if ((detail?.attempts ?? 0) === 0 && TERMINAL_TASK.has(state)) {
      logStatus.textContent = 'the task never ran: no log';
      log = null;
      return;
    }
    const abort = new AbortController();
    log = { attempt, abort, latest };
    logStatus.textContent = `attempt ${attempt}: streaming…`;
    const refreshProgress = debounce(() => refresh(), 300);
    streamNdjson(`${v1('runs', runId, 'tasks', task, 'logs')}`, { follow: true, attempt }, {
      signal: abort.signal,
      onLines: (lines) => {
        const atBottom = logPre.scrollHeight - logPre.scrollTop - logPre.clientHeight < 40;
        const text = lines.map((l) => formatLogLine(l)).join('\n');
        logPre.appendChild(document.createTextNode(`${text}\n`));
        logLines += lines.length;
        while (logLines > MAX_LOG_LINES && logPre.firstChild) {
          logLines -= (logPre.firstChild.textContent.match(/\n/g) || []).length;
          logPre.removeChild(logPre.firstChild);
        }
        if (atBottom) logPre.scrollTop = logPre.scrollHeight;
        if (lines.some((l) => l.source === 'progress')) {
          const last = [...lines].reverse().find((l) => l.source === 'progress');
          lineProgress = progressFromLine(last);
          if (!detail?.progress) setProgress(lineProgress);
          refreshProgress();
        }
      },
    }).then(() => {
      if (log?.abort !== abort) return;
      logStatus.textContent = `attempt ${attempt}: ended${logLines ? '' : ' (no lines)'}`;
    }).catch((e) => {
      if (e.name === 'AbortError' || log?.abort !== abort) return;
      logStatus.textContent = `attempt ${attempt}: ${e.message}`;
    });
  }

  async function refresh() {
    if (!task) return;
    const seq = ++loadSeq;
    try {
      const d = await api.get(v1('runs', runId, 'tasks', task));
      if (seq !== loadSeq) return;
      detail = d;
      renderDetail(d);
      // Follow the latest attempt unless the user picked one: a new attempt
      // starts its own log.
      const want = selectedAttempt ?? Math.max(1, d.attempts);
      if (d.attempts === 0 && TERMINAL_TASK.has(d.state)) {
        if (log) startLog(want, true); // says it never ran
        else logStatus.textContent = 'the task never ran: no log';
      } else if (!log || log.attempt !== want) {
        startLog(want, selectedAttempt === null);
      }
    } catch (e) {
      if (seq !== loadSeq) return;
      if (e.status === 404) replace(info, h('div', { id: 'not-found', class: 'error' }, `Task not found: ${e.message}`));
      else replace(info, errorBox(e));
    }
  }

  return {
    el,
    task: () => task,
    show(name) {
      if (name === task) return;
      log?.abort.abort();
      log = null;
      task = name;
      detail = null;
      selectedAttempt = null;
      downstream.checked = false;
      replace(title, name);
      replace(stateBox);
      replace(info, h('p', { class: 'loading' }, 'Loading…'));
      replace(failure);
      replace(actionResult);
      replace(attempts);
      output.textContent = '';
      logPre.textContent = '';
      logStatus.textContent = '';
      progressBox.hidden = true;
      refresh();
      title.focus({ preventScroll: true });
    },
    refresh,
    destroy() {
      loadSeq++;
      log?.abort.abort();
      log = null;
      el.remove();
    },
  };
}

// Modal dialogs (native <dialog>: showModal keeps focus inside and makes
// the page inert; Esc closes). Focus returns to what had it before.

import { h } from './dom.js';

/**
 * Opens a modal dialog with `title` and `content`; answers
 * `{dialog, close(value), closed: Promise<value>}`. The dialog is removed
 * from the page when it closes.
 */
export function openDialog({ title, content, id, labelledBy }) {
  const opener = document.activeElement;
  const heading = h('h2', { id: labelledBy ?? `${id ?? 'dialog'}-title` }, title);
  const dialog = h('dialog', { id, 'aria-labelledby': heading.id }, heading, content);
  document.body.appendChild(dialog);
  let resolve;
  const closed = new Promise((r) => { resolve = r; });
  dialog.addEventListener('close', () => {
    dialog.remove();
    if (opener && opener.isConnected && typeof opener.focus === 'function') opener.focus();
    resolve(dialog.returnValue);
  });
  dialog.showModal();
  return { dialog, close: (value = '') => dialog.close(value), closed };
}

/**
 * Asks for confirmation. `extra` (optional nodes, e.g. a checkbox) goes
 * above the buttons. Answers true when confirmed.
 */
export function confirmDialog({ title, message, confirmLabel = 'Confirm', danger = false, extra = null }) {
  const yes = h('button', { type: 'button', id: 'confirm-yes', class: danger ? 'danger' : null }, confirmLabel);
  const no = h('button', { type: 'button', id: 'confirm-no', class: 'secondary' }, 'Cancel');
  const content = h('div', null, h('p', { id: 'confirm-message' }, message), extra, h('div', { class: 'buttons' }, no, yes));
  const { dialog, close, closed } = openDialog({ title, content, id: 'confirm-dialog' });
  dialog.setAttribute('aria-describedby', 'confirm-message');
  yes.addEventListener('click', () => close('yes'));
  no.addEventListener('click', () => close('no'));
  no.focus();
  return closed.then((value) => value === 'yes');
}

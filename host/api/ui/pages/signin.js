// Sign-in with a dagr token. The token goes to POST /ui/session once and is
// then forgotten: the session is an HttpOnly cookie the page cannot read.

import { getSession, signIn } from '../api.js';
import { h, replace } from '../dom.js';
import { safeNext } from '../routes.js';

export function render(ctx) {
  const next = safeNext(ctx.query.get('next'));
  if (getSession()) {
    ctx.navigate(next, { replace: true });
    return null;
  }
  const token = h('input', { id: 'token', type: 'password', autocomplete: 'off', required: true, spellcheck: 'false' });
  const tenant = h('input', { id: 'tenant', type: 'text', autocomplete: 'off', spellcheck: 'false', placeholder: 'default' });
  const error = h('p', { id: 'signin-error', class: 'error', role: 'alert', hidden: true });
  const button = h('button', { id: 'sign-in', type: 'submit' }, 'Sign in');
  const form = h('form', { class: 'signin card', novalidate: true },
    h('h1', null, 'Sign in to dagr'),
    h('p', { class: 'muted' }, 'Use a dagr API token (dagr_…). `dagr serve` prints one at its first start and saves it as dagr-data/token.'),
    h('div', { class: 'field' }, h('label', { for: 'token' }, 'Token'), token),
    h('div', { class: 'field' }, h('label', { for: 'tenant' }, 'Tenant (admin token only, optional)'), tenant),
    error,
    button);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    error.hidden = true;
    const value = token.value.trim();
    if (!value) {
      error.textContent = 'Enter a token.';
      error.hidden = false;
      token.focus();
      return;
    }
    button.disabled = true;
    try {
      await signIn(value, tenant.value.trim() || undefined);
      token.value = '';
      ctx.navigate(next, { replace: true });
    } catch (e) {
      token.value = '';
      error.textContent = e.status === 401 ? `Not signed in: ${e.message}` : e.message;
      error.hidden = false;
      token.focus();
    } finally {
      button.disabled = false;
    }
  });
  replace(ctx.main, form);
  token.focus();
  return null;
}

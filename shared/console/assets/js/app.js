// The console's shell: sign-in, layout, navigation and the hash router.

import { h, replace, href } from './dom.js';
import { session, call, path, ApiError } from './api.js';
import { errorBox, field, progress } from './render.js';
import * as accounts from './pages/accounts.js';
import * as catalogs from './pages/catalogs.js';
import * as integrations from './pages/integrations.js';
import * as overlays from './pages/overlays.js';
import * as indexes from './pages/indexes.js';
import * as access from './pages/access.js';
import * as activity from './pages/activity.js';

const root = document.getElementById('app');

// Route patterns over the hash's path segments; `:name` captures one decoded segment.
const ROUTES = [
  ['accounts', accounts.list],
  ['a/:account/catalogs', catalogs.list],
  ['a/:account/catalogs/:catalog', catalogs.detail],
  ['a/:account/catalogs/:catalog/tables/:ns/:name', (ctx) => catalogs.relation(ctx, 'tables')],
  ['a/:account/catalogs/:catalog/views/:ns/:name', (ctx) => catalogs.relation(ctx, 'views')],
  ['a/:account/integrations', integrations.list],
  ['a/:account/integrations/:integration', integrations.detail],
  ['a/:account/overlays', overlays.list],
  ['a/:account/overlays/:overlay', overlays.detail],
  ['a/:account/index-catalogs', indexes.list],
  ['a/:account/index-catalogs/:index', indexes.detail],
  ['a/:account/access', access.page],
  ['a/:account/audit', activity.audit],
].map(([pattern, page]) => [pattern.split('/'), page]);

function match(segments) {
  for (const [pattern, page] of ROUTES) {
    if (pattern.length !== segments.length) continue;
    const params = {};
    if (pattern.every((p, i) => (p.startsWith(':') ? ((params[p.slice(1)] = segments[i]), true) : p === segments[i]))) {
      return { page, params };
    }
  }
  return null;
}

function currentSegments() {
  const raw = location.hash.replace(/^#\/?/, '');
  if (!raw) return [];
  try {
    return raw.split('/').map(decodeURIComponent);
  } catch {
    return ['not-found'];
  }
}

/** Navigates to `hash`, rendering even when it is already the current one. */
function go(hash) {
  if (location.hash === hash) render();
  else location.hash = hash;
}

function homeHash(s) {
  if (s.account) return href('a', s.account, 'catalogs');
  return s.operator ? href('accounts') : href('signin');
}

// ---- sign-in ------------------------------------------------------------------------------

function signIn(message) {
  document.title = 'Sign in · Flotilla console';
  const token = h('input', { type: 'password', name: 'token', autocomplete: 'off', spellcheck: 'false', required: true, id: 'signin-token' });
  const account = h('input', { type: 'text', name: 'account', autocomplete: 'off', spellcheck: 'false', placeholder: 'e.g. acme', id: 'signin-account' });
  const out = h('div', { class: 'form-out' }, message ? h('div', { class: 'notice' }, message) : null);
  const submit = h('button', { type: 'submit' }, 'Sign in');
  const form = h('form', { class: 'form signin-form', novalidate: true },
    field('API token', token, 'The same bearer token the API and CLI use. It is kept only in this browser tab and forgotten when the tab closes.'),
    field('Account', account, 'Required for a token scoped to accounts; optional for an operator token.'),
    h('div', { class: 'form-actions' }, submit),
    out,
  );
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const t = token.value.trim();
    const a = account.value.trim();
    if (!t) {
      replace(out, h('div', { class: 'error', role: 'alert' }, h('div', { class: 'error-message' }, 'Enter a token.')));
      return;
    }
    submit.disabled = true;
    const p = progress('Checking the token');
    replace(out, p);
    try {
      let operator = false;
      try {
        await call('GET', '/v1/accounts', { query: { page_size: 1 }, token: t });
        operator = true;
      } catch (err) {
        if (!(err instanceof ApiError) || err.status !== 403) throw err;
      }
      if (a) await call('GET', path`/v1/accounts/${a}`, { token: t });
      else if (!operator) throw new ApiError(0, 'ACCOUNT_REQUIRED', 'This token is scoped to accounts: enter the account to open.');
      token.value = '';
      session.set({ token: t, operator, account: a || null });
      // A deep link that led here opens once signed in.
      const deep = currentSegments();
      go(deep.length && deep[0] !== 'signin' ? location.hash : homeHash(session.get()));
    } catch (err) {
      replace(out, errorBox(err, 'Sign-in failed'));
    } finally {
      p.stop();
      submit.disabled = false;
    }
  });
  replace(root, h('div', { class: 'signin' },
    h('div', { class: 'signin-card' },
      h('div', { class: 'brand large' }, h('img', { src: 'assets/icon.svg', alt: '', width: 36, height: 36 }), h('span', {}, 'Flotilla')),
      h('h1', {}, 'Sign in to the console'),
      form,
    ),
  ));
  token.focus();
}

// ---- layout -------------------------------------------------------------------------------

function sidebar(s, account, active) {
  const item = (label, target, key) => h('a', { href: target, class: ['nav-item', active === key && 'active'], 'data-nav': key }, label);
  const switcher = h('input', { type: 'text', value: account || '', 'aria-label': 'Account', placeholder: 'account id', spellcheck: 'false', id: 'account-switch' });
  switcher.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && switcher.value.trim()) location.hash = href('a', switcher.value.trim(), 'catalogs');
  });
  return h('aside', { class: 'sidebar' },
    h('a', { class: 'brand', href: homeHash(s) }, h('img', { src: 'assets/icon.svg', alt: '', width: 28, height: 28 }), h('span', {}, 'Flotilla')),
    h('div', { class: 'nav-group' },
      h('div', { class: 'nav-heading' }, 'Account'),
      switcher,
    ),
    account ? h('nav', { class: 'nav-group' },
      item('Catalogs', href('a', account, 'catalogs'), 'catalogs'),
      item('Integrations', href('a', account, 'integrations'), 'integrations'),
      item('Overlays', href('a', account, 'overlays'), 'overlays'),
      item('Index catalogs', href('a', account, 'index-catalogs'), 'index-catalogs'),
      item('Access', href('a', account, 'access'), 'access'),
      item('Audit', href('a', account, 'audit'), 'audit'),
    ) : null,
    s.operator ? h('nav', { class: 'nav-group' },
      h('div', { class: 'nav-heading' }, 'Operator'),
      item('Accounts', href('accounts'), 'accounts'),
    ) : null,
  );
}

function topbar(s, crumbs) {
  const out = h('button', { class: 'secondary small', type: 'button', id: 'sign-out' }, 'Sign out');
  out.addEventListener('click', () => {
    session.clear();
    go('#/signin');
  });
  return h('header', { class: 'topbar' },
    h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumbs' },
      crumbs.map((c, i) => [
        i ? h('span', { class: 'crumb-sep' }, '/') : null,
        Array.isArray(c) ? h('a', { href: c[1] }, c[0]) : h('span', { class: 'crumb-current' }, c),
      ]),
    ),
    h('div', { class: 'who' },
      h('span', { class: 'who-role' }, s.operator ? 'operator token' : 'account token'),
      out,
    ),
  );
}

// ---- router -------------------------------------------------------------------------------

let renderSeq = 0;

async function render() {
  const seq = ++renderSeq;
  const s = session.get();
  const segments = currentSegments();
  if (!s || segments[0] === 'signin') {
    if (s && segments[0] === 'signin') {
      location.hash = homeHash(s);
      return;
    }
    signIn(sessionMessage);
    sessionMessage = null;
    return;
  }
  if (segments.length === 0) {
    location.hash = homeHash(s);
    return;
  }
  const found = match(segments);
  const account = found?.params.account || s.account || null;
  const active = found ? (segments[0] === 'accounts' ? 'accounts' : segments[2]) : null;
  const content = h('main', { class: 'content', id: 'content' }, progress('Loading'));
  const bar = h('div', {});
  replace(root, h('div', { class: 'shell' }, sidebar(s, account, active), h('div', { class: 'main' }, bar, content)));
  replace(bar, topbar(s, []));
  if (!found) {
    replace(content, h('h1', {}, 'Not found'), h('p', {}, 'The console has no page at this address.'));
    return;
  }
  const ctx = { params: found.params, account, session: s, rerender: render };
  try {
    const view = await found.page(ctx);
    if (seq !== renderSeq) return;
    document.title = `${view.title} · Flotilla console`;
    replace(bar, topbar(s, view.crumbs || []));
    replace(content, h('div', { class: 'page-head' }, h('h1', {}, view.title), view.actions || null), view.body);
  } catch (err) {
    if (seq !== renderSeq) return;
    document.title = 'Error · Flotilla console';
    replace(bar, topbar(s, account ? [[account, href('a', account, 'catalogs')], 'Error'] : ['Error']));
    replace(content, errorBox(err, 'This page could not be loaded'));
  }
}

let sessionMessage = null;
window.addEventListener('flotilla:unauthenticated', (ev) => {
  if (!session.get()) return;
  session.clear();
  sessionMessage = `Signed out: ${ev.detail}`;
  go('#/signin');
});
window.addEventListener('hashchange', render);
render();

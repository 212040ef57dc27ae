// Accounts (operator tokens only).

import { h, link, href } from '../dom.js';
import { get, post } from '../api.js';
import { card, pager, table, time, form, field, disclosure } from '../render.js';

export async function list(ctx) {
  if (!ctx.session.operator) {
    return {
      title: 'Accounts',
      crumbs: ['Accounts'],
      body: card(null, h('p', {}, 'Listing accounts needs an operator token. This session\u2019s token is scoped to accounts.')),
    };
  }
  const accounts = pager({
    label: 'accounts',
    emptyText: 'No accounts yet.',
    load: (token, size) => get('/v1/accounts', { page_size: size, page_token: token }),
    draw: (items) => table([
      ['Account', (a) => link(a.id, 'a', a.id, 'catalogs')],
      ['Display name', (a) => a.display_name ?? ''],
      ['Created', (a) => time(a.create_time)],
      ['Updated', (a) => time(a.update_time)],
    ], items, (a) => ({ 'data-id': a.id })),
  });
  const id = h('input', { type: 'text', name: 'id', spellcheck: 'false', placeholder: 'lowercase letters, digits, dashes' });
  const name = h('input', { type: 'text', name: 'display_name' });
  const create = form([
    field('Account id', id, 'Optional; generated when empty.'),
    field('Display name', name),
  ], 'Create account', async () => {
    const body = {};
    if (id.value.trim()) body.id = id.value.trim();
    if (name.value.trim()) body.display_name = name.value.trim();
    const a = await post('/v1/accounts', body);
    location.hash = href('a', a.id, 'catalogs');
  });
  return {
    title: 'Accounts',
    crumbs: ['Accounts'],
    body: [
      h('p', { class: 'lead' }, 'Every account is an isolated tenant: its catalogs, integrations and overlays are reachable only with an operator token or a token scoped to it. Open an account to manage it.'),
      card(null, accounts),
      disclosure('Create an account', create),
    ],
  };
}

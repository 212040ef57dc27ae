// Activity: a catalog's change events (GET {A}/events?catalog_id=), and the account's audit
// trail (GET {A}/audit, account admins). Both page forward with the API's tokens: a page
// holds what happened after the previous one, oldest first; the last page is empty and a
// later visit of it shows what happened since.

import { h, href } from '../dom.js';
import { get, path } from '../api.js';
import { card, pager, table, time, form, field, mono, badge, nsPath } from '../render.js';

/** The object an event or audit record is about: namespace levels, then the name. */
function object(namespace, name, destination) {
  const levels = Array.isArray(namespace) ? [...namespace] : [];
  if (name) levels.push(name);
  return h('span', { class: 'event-object' },
    nsPath(levels),
    destination ? [' → ', nsPath([...(destination.namespace || []), destination.name])] : null,
  );
}

function actor(a) {
  if (!a) return h('span', { class: 'muted' }, '—');
  return h('span', { class: 'actor' }, a.type && a.type !== 'PRINCIPAL' ? [badge(String(a.type).toLowerCase(), 'plain'), ' '] : null, String(a.id ?? ''));
}

/** The activity tab of a catalog: its events with their actor, type, object and time. */
export function catalogActivity(a, c) {
  const events = pager({
    label: 'events',
    pageSize: 25,
    emptyText: 'No changes recorded in this catalog (events are kept 7 days).',
    load: (token, size) => get(path`/v1/accounts/${a}/events`, { catalog_id: c.id, page_size: size, page_token: token }),
    draw: (items) => table([
      ['#', (e) => String(e.sequence)],
      ['Time', (e) => time(e.timestamp_ms)],
      ['Actor', (e) => actor(e.actor)],
      ['Change', (e) => badge(e.operation?.type ?? '', 'plain')],
      ['Object', (e) => object(e.operation?.namespace, e.operation?.name, e.operation?.destination)],
      ['Request', (e) => mono(e.request_id ?? '')],
    ], items, (e) => ({ 'data-event': e.event_id, 'data-type': e.operation?.type ?? '' })),
  });
  return card(null,
    h('p', { class: 'muted' }, 'Every change to this catalog\u2019s namespaces, tables and views, oldest first, as far as you may read them. "Next" shows what happened after this page.'),
    events,
  );
}

function what(r) {
  if (r.kind === 'mutation') {
    const s = r.securable || {};
    return h('span', {}, badge(r.action ?? '', 'plain'), ' ', object(s.namespace, s.name), ' ', h('span', { class: 'muted' }, 'in '), link(s.catalog_id));
  }
  return h('span', {},
    badge(String(r.status ?? ''), 'bad'), ' ', mono(`${r.method ?? ''} ${r.route ?? ''}`),
    r.suppressed ? h('span', { class: 'muted' }, ` (+${r.suppressed} more this minute)`) : null,
  );
}

let currentAccount = null;
function link(catalog) {
  if (!catalog) return h('span', { class: 'muted' }, '—');
  return h('a', { href: href('a', currentAccount, 'catalogs', catalog) }, mono(catalog));
}

/** The account's audit trail: who changed what, and who was refused. */
export async function audit(ctx) {
  const a = ctx.account;
  currentAccount = a;
  const principal = h('input', { type: 'text', name: 'principal', spellcheck: 'false', placeholder: 'any principal' });
  let filter = {};
  const records = pager({
    label: 'records',
    pageSize: 25,
    emptyText: 'Nothing audited yet.',
    load: (token, size) => get(path`/v1/accounts/${a}/audit`, { ...filter, page_size: size, page_token: token }),
    draw: (items) => table([
      ['Time', (r) => time(r.timestamp_ms)],
      ['Kind', (r) => badge(r.kind ?? '', r.kind === 'mutation' ? 'plain' : 'warn')],
      ['Principal', (r) => String(r.principal ?? '')],
      ['What', what],
      ['Request', (r) => mono(r.request_id ?? '')],
    ], items, (r) => ({ 'data-kind': r.kind ?? '', 'data-id': r.id ?? '' })),
  });
  const narrow = form([
    field('Principal', principal, 'Only what this principal did or was refused (its subject, or "anonymous").'),
  ], 'Filter', async () => {
    const p = principal.value.trim();
    filter = p ? { principal: p } : {};
    await records.reload();
  }, { cls: 'inline' });
  return {
    title: 'Audit',
    crumbs: [[a, href('a', a, 'catalogs')], 'Audit'],
    body: [
      h('p', { class: 'lead' }, 'Who changed what in this account, and who was refused. Mutations are the change events (kept 7 days); refused requests are kept 90 days. Only account admins can read the audit.'),
      card(null, narrow, records),
    ],
  };
}

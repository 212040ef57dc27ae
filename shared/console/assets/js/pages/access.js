// Access control: who the viewer is in the account, and for an admin the account's roles,
// grants and service principals, with grant, revoke and membership changes. A viewer that
// administers nothing sees what it holds and the grants on what it manages.

import { h, replace, href } from '../dom.js';
import { get, post, del, put, path, privileges } from '../api.js';
import { card, pager, table, time, form, field, disclosure, mono, kv, badge, errorBox } from '../render.js';

const PRIVILEGES = ['READ', 'WRITE', 'MANAGE', 'USE', 'CATALOG_CREATE', 'INTEGRATION_CREATE', 'INDEX_CATALOG_CREATE', 'ACCOUNT_ADMIN'];
const TYPES = ['CATALOG', 'NAMESPACE', 'TABLE', 'VIEW', 'INTEGRATION', 'OVERLAY', 'INDEX_CATALOG', 'ACCOUNT'];

function securableText(s) {
  const parts = [s.type];
  for (const k of ['catalog_id', 'integration_id', 'overlay_id']) if (s[k]) parts.push(s[k]);
  if (s.path) parts.push(s.path.join('.'));
  if (s.name) parts.push(s.name);
  return parts.join(' ');
}

function select(name, options) {
  return h('select', { name }, options.map((o) => h('option', { value: o }, o)));
}

function grantForm(a, onDone) {
  const role = h('input', { type: 'text', name: 'role', spellcheck: 'false' });
  const privilege = select('privilege', PRIVILEGES);
  const type = select('securable_type', TYPES);
  const id = h('input', { type: 'text', name: 'securable_id', spellcheck: 'false', placeholder: 'catalog, integration or overlay id' });
  const ns = h('input', { type: 'text', name: 'path', spellcheck: 'false', placeholder: 'a.b (namespaces, tables, views)' });
  const name = h('input', { type: 'text', name: 'name', spellcheck: 'false', placeholder: 'table, view or index catalog name' });
  return form([
    h('div', { class: 'row' }, field('Role', role), field('Privilege', privilege)),
    h('div', { class: 'row' }, field('Securable', type), field('Id', id)),
    h('div', { class: 'row' }, field('Namespace', ns), field('Name', name)),
  ], 'Grant', async () => {
    const t = type.value;
    const s = { type: t };
    if (['CATALOG', 'NAMESPACE', 'TABLE', 'VIEW'].includes(t)) s.catalog_id = id.value.trim();
    if (['NAMESPACE', 'TABLE', 'VIEW'].includes(t)) s.path = ns.value.trim().split('.').filter(Boolean);
    if (['TABLE', 'VIEW', 'INDEX_CATALOG'].includes(t)) s.name = name.value.trim();
    if (t === 'INTEGRATION') s.integration_id = id.value.trim();
    if (t === 'OVERLAY') s.overlay_id = id.value.trim();
    await post(path`/v1/accounts/${a}/grants`, { role: role.value.trim(), privilege: privilege.value, securable: s });
    onDone();
  });
}

function grantsCard(a, rerender) {
  return card('Grants', pager({
    label: 'grants',
    emptyText: 'No grants you may see.',
    load: (token, size) => get(path`/v1/accounts/${a}/grants`, { page_size: size, page_token: token }),
    draw: (items) => table([
      ['Role', (g) => g.role],
      ['Privilege', (g) => badge(g.privilege, 'plain')],
      ['Securable', (g) => mono(securableText(g.securable))],
      ['Granted', (g) => time(g.create_time)],
      ['', (g) => {
        const b = h('button', { type: 'button', class: 'secondary small', 'data-revoke': g.id }, 'Revoke');
        b.addEventListener('click', async () => {
          b.disabled = true;
          try {
            await del(path`/v1/accounts/${a}/grants/${g.id}`, g.etag);
            rerender();
          } catch (err) {
            b.replaceWith(errorBox(err, 'Revoke failed'));
          }
        });
        return b;
      }],
    ], items, (g) => ({ 'data-grant': g.id })),
  }));
}

function rolesCard(a, rerender) {
  const members = (r) => (r.members || []).map((m) => {
    const x = h('button', { type: 'button', class: 'secondary small', title: 'Remove', 'data-member': m }, `${m} ×`);
    x.addEventListener('click', async () => {
      await del(path`/v1/accounts/${a}/roles/${r.name}/members/${m}`);
      rerender();
    });
    return x;
  });
  const roles = pager({
    label: 'roles',
    emptyText: 'No roles yet.',
    load: (token, size) => get(path`/v1/accounts/${a}/roles`, { page_size: size, page_token: token }),
    draw: (items) => table([['Role', (r) => r.name], ['Members', members], ['Created', (r) => time(r.create_time)]], items, (r) => ({ 'data-role': r.name })),
  });
  const name = h('input', { type: 'text', name: 'role_name', spellcheck: 'false' });
  const create = form([field('Name', name)], 'Create role', async () => {
    await post(path`/v1/accounts/${a}/roles`, { name: name.value.trim() });
    rerender();
  });
  const role = h('input', { type: 'text', name: 'member_role', spellcheck: 'false' });
  const member = h('input', { type: 'text', name: 'member', spellcheck: 'false', placeholder: 'principal name or group:NAME' });
  const add = form([h('div', { class: 'row' }, field('Role', role), field('Member', member))], 'Add member', async () => {
    await put(path`/v1/accounts/${a}/roles/${role.value.trim()}/members/${member.value.trim()}`);
    rerender();
  });
  return card('Roles', roles, disclosure('Create a role', create), disclosure('Add a member', add));
}

function principalsCard(a, rerender) {
  const shown = h('div', { class: 'form-out' });
  const principals = pager({
    label: 'service principals',
    emptyText: 'No service principals yet.',
    load: (token, size) => get(path`/v1/accounts/${a}/principals`, { page_size: size, page_token: token }),
    draw: (items) => table([
      ['Name', (p) => p.name],
      ['Client id', (p) => mono(p.client_id)],
      ['Secret generation', (p) => String(p.secret_generation)],
      ['', (p) => {
        const b = h('button', { type: 'button', class: 'secondary small', 'data-rotate': p.id }, 'Rotate secret');
        b.addEventListener('click', async () => {
          const r = await post(path`/v1/accounts/${a}/principals/${p.id}/rotate`, {});
          replace(shown, secretNotice(r));
        });
        return b;
      }],
    ], items),
  });
  const name = h('input', { type: 'text', name: 'principal_name', spellcheck: 'false' });
  const create = form([field('Name', name, 'Letters, digits, ".", "_" and "-".')], 'Create service principal', async () => {
    const r = await post(path`/v1/accounts/${a}/principals`, { name: name.value.trim() });
    replace(shown, secretNotice(r));
  });
  return card('Service principals', shown, principals, disclosure('Create a service principal', create));
}

/** The one time a client secret is shown. */
function secretNotice(p) {
  return h('div', { class: 'notice', role: 'status' },
    h('p', {}, `Client credentials of ${p.name}: copy the secret now, it is not shown again.`),
    kv({ client_id: p.client_id, client_secret: p.client_secret }, { raw: true }),
  );
}

export async function page(ctx) {
  const a = ctx.account;
  const me = await privileges(a);
  const v = me.view || {};
  const you = card('You', kv({
    principal: v.principal ?? '(a token naming no principal)',
    account_admin: me.admin,
    roles: (v.roles || []).join(', ') || '—',
  }, { raw: true }));
  const body = [h('p', { class: 'lead' }, 'Roles hold grants of privileges on securables; principals and groups are their members. A revoke is in force on the next request.'), you];
  if (me.admin) {
    body.push(rolesCard(a, ctx.rerender), grantsCard(a, ctx.rerender), disclosure('Grant a privilege', grantForm(a, ctx.rerender)), principalsCard(a, ctx.rerender));
  } else {
    // Grants on what the viewer manages (the server lists only those), and granting there.
    body.push(grantsCard(a, ctx.rerender), disclosure('Grant a privilege on something you manage', grantForm(a, ctx.rerender)));
  }
  return { title: 'Access', crumbs: [[a, href('a', a, 'catalogs')], 'Access'], body };
}

// Index catalogs (ParqDB): the list, creation, and one index catalog's namespaces and
// registered indexes.

import { h, replace, href, link } from '../dom.js';
import { get, post, path, nsParam, privileges } from '../api.js';
import { card, pager, table, time, form, field, disclosure, mono, kv, nsPath, more, empty, errorBox, progress } from '../render.js';

export async function list(ctx) {
  const a = ctx.account;
  const can = await privileges(a);
  const catalogs = pager({
    label: 'index catalogs',
    emptyText: 'No index catalogs yet.',
    load: (token, size) => get(path`/v1/accounts/${a}/index-catalogs`, { page_size: size, page_token: token }),
    draw: (items) => table([
      ['Index catalog', (c) => link(c.name, 'a', a, 'index-catalogs', c.name)],
      ['Warehouse', (c) => mono(c.warehouse)],
      ['Created', (c) => time(c.create_time)],
    ], items),
  });
  const name = h('input', { type: 'text', name: 'name', spellcheck: 'false' });
  const warehouse = h('input', { type: 'text', name: 'warehouse', spellcheck: 'false', placeholder: 's3://bucket/indexes/' });
  const create = form([h('div', { class: 'row' }, field('Name', name), field('Warehouse', warehouse))], 'Create index catalog', async () => {
    const c = await post(path`/v1/accounts/${a}/index-catalogs`, { name: name.value.trim(), warehouse: warehouse.value.trim() });
    location.hash = href('a', a, 'index-catalogs', c.name);
  });
  return {
    title: 'Index catalogs',
    crumbs: [[a, href('a', a, 'catalogs')], 'Index catalogs'],
    body: [
      h('p', { class: 'lead' }, 'Index catalogs register secondary indexes (ParqDB) over Parquet files and Iceberg tables, with compare-and-swap commits.'),
      card(null, catalogs),
      can.has('INDEX_CATALOG_CREATE') ? disclosure('Create an index catalog', create) : null,
    ],
  };
}

export async function detail(ctx) {
  const a = ctx.account;
  const name = ctx.params.index;
  const c = await get(path`/v1/accounts/${a}/index-catalogs/${name}`);
  const pane = h('div', { class: 'pane-main' }, empty('Select a namespace to list its indexes.'));
  let selected = null;
  const nsItem = (ns) => {
    const b = h('button', { type: 'button', class: 'tree-name', 'data-ns': ns.path.join('.') }, nsPath(ns.path));
    b.addEventListener('click', () => {
      if (selected) selected.classList.remove('selected');
      selected = b;
      b.classList.add('selected');
      replace(pane, indexes(a, name, ns.path));
    });
    return h('li', {}, h('div', { class: 'tree-row' }, b));
  };
  const namespaces = more(
    (token) => get(path`/v1/accounts/${a}/index-catalogs/${name}/namespaces`, { page_size: 50, page_token: token }),
    nsItem,
    'No namespaces yet.',
  );
  return {
    title: c.name,
    crumbs: [[a, href('a', a, 'catalogs')], ['Index catalogs', href('a', a, 'index-catalogs')], c.name],
    body: h('div', { class: 'stack' },
      card('Index catalog', kv(c, { order: ['name', 'warehouse', 'create_time'], skip: ['etag'], render: { warehouse: (v) => mono(v) } })),
      card('Namespaces and indexes', h('div', { class: 'two-pane' }, h('div', { class: 'pane-side tree' }, h('div', { class: 'pane-title' }, 'Namespaces'), namespaces), pane)),
    ),
  };
}

function indexes(a, catalog, levels) {
  const seg = nsParam(levels);
  const entry = h('div', {});
  return h('div', {},
    h('h3', {}, nsPath(levels)),
    pager({
      label: 'indexes',
      emptyText: 'No indexes registered in this namespace.',
      load: (token, size) => get(path`/v1/accounts/${a}/index-catalogs/${catalog}/namespaces/${seg}/indexes`, { page_size: size, page_token: token }),
      draw: (items) => table([
        ['Index', (i) => {
          const b = h('button', { type: 'button', class: 'link-button' }, i.name);
          b.addEventListener('click', async () => {
            replace(entry, progress('Loading the index'));
            try {
              const e = await get(path`/v1/accounts/${a}/index-catalogs/${catalog}/namespaces/${seg}/indexes/${i.name}`);
              replace(entry, card(i.name, kv(e, { order: ['identifier', 'metadata_location', 'source'], render: { metadata_location: (v) => mono(v) } })));
            } catch (err) {
              replace(entry, errorBox(err, 'Could not load the index'));
            }
          });
          return b;
        }],
      ], items),
    }),
    entry,
  );
}

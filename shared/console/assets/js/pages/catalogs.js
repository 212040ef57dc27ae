// Catalogs: the list, one catalog (namespace tree, tables and views, directory health,
// engine recipes) and one table or view (schema tree, format, locations, provenance).

import { h, replace, href, link } from '../dom.js';
import { get, post, path, nsParam, privileges } from '../api.js';
import {
  card, pager, table, time, form, field, disclosure, mono, kv, value, badge, nsPath, tabs, more,
  errorBox, progress, empty, yesNo, duration,
} from '../render.js';
import { recipes } from '../engines.js';
import { catalogActivity } from './activity.js';

const accountCrumbs = (a) => [[a, href('a', a, 'catalogs')]];

export async function list(ctx) {
  const a = ctx.account;
  // Reading the account first: a token without access to it stops here with the API's answer.
  const account = await get(path`/v1/accounts/${a}`);
  // Actions the viewer's grants do not allow are not offered.
  const can = await privileges(a);
  const catalogs = pager({
    label: 'catalogs',
    emptyText: 'No catalogs in this account yet.',
    load: (token, size) => get(path`/v1/accounts/${a}/catalogs`, { page_size: size, page_token: token }),
    draw: (items) => table([
      ['Catalog', (c) => link(c.display_name, 'a', a, 'catalogs', c.id)],
      ['Description', (c) => c.description ?? ''],
      ['Id', (c) => mono(c.id)],
      ['Created', (c) => time(c.create_time)],
    ], items, (c) => ({ 'data-id': c.id })),
  });
  const name = h('input', { type: 'text', name: 'display_name', spellcheck: 'false' });
  const description = h('input', { type: 'text', name: 'description' });
  const warehouse = h('input', { type: 'text', name: 'warehouse', spellcheck: 'false', placeholder: 's3://bucket/prefix' });
  const create = form([
    field('Name', name),
    field('Description', description),
    field('Warehouse', warehouse, 'Optional: where new Iceberg tables created through engines are stored.'),
  ], 'Create catalog', async () => {
    const body = { display_name: name.value.trim() };
    if (description.value.trim()) body.description = description.value.trim();
    if (warehouse.value.trim()) body.properties = { warehouse: warehouse.value.trim() };
    const c = await post(path`/v1/accounts/${a}/catalogs`, body);
    location.hash = href('a', a, 'catalogs', c.id);
  });
  return {
    title: 'Catalogs',
    crumbs: [...accountCrumbs(a), 'Catalogs'],
    body: [
      h('p', { class: 'lead' }, `Account ${account.display_name || account.id}: catalogs hold namespaces, tables and views, created directly or materialized by overlays from upstream catalogs.`),
      card(null, catalogs),
      can.has('CATALOG_CREATE') ? disclosure('Create a catalog', create) : null,
    ],
  };
}

export async function detail(ctx) {
  const a = ctx.account;
  const c = await get(path`/v1/accounts/${a}/catalogs/${ctx.params.catalog}`);
  return {
    title: c.display_name,
    crumbs: [...accountCrumbs(a), ['Catalogs', href('a', a, 'catalogs')], c.display_name],
    body: [
      c.description ? h('p', { class: 'lead' }, c.description) : null,
      tabs([
        ['Browse', 'browse', () => browser(a, c)],
        ['Activity', 'activity', () => catalogActivity(a, c)],
        ['Directory health', 'directory', () => directory(a, c)],
        ['Connect an engine', 'engines', () => card(null, recipes(a, c))],
        ['Details', 'details', () => card(null, kv(c, { order: ['id', 'display_name', 'description', 'properties', 'create_time', 'update_time'], skip: ['etag'] }))],
      ]),
    ],
  };
}

// ---- namespace tree and relations ------------------------------------------------------

function browser(a, c) {
  const pane = h('div', { class: 'pane-main' }, empty('Select a namespace to see its tables and views.'));
  let selected = null;
  function node(ns) {
    const label = ns.path[ns.path.length - 1];
    const children = h('div', { class: 'tree-children', hidden: true });
    const toggle = h('button', { type: 'button', class: 'tree-toggle', 'aria-expanded': 'false', 'aria-label': 'Expand' }, '▸');
    const name = h('button', { type: 'button', class: 'tree-name', 'data-ns': ns.path.join('.') }, label);
    let loaded = false;
    toggle.addEventListener('click', () => {
      const open = children.hidden;
      children.hidden = !open;
      toggle.textContent = open ? '▾' : '▸';
      toggle.setAttribute('aria-expanded', String(open));
      if (open && !loaded) {
        loaded = true;
        children.append(namespaces(ns.path));
      }
    });
    name.addEventListener('click', () => {
      if (selected) selected.classList.remove('selected');
      selected = name;
      name.classList.add('selected');
      replace(pane, namespacePane(a, c, ns));
    });
    return h('li', {}, h('div', { class: 'tree-row' }, toggle, name), children);
  }
  function namespaces(parent) {
    return more(
      (token) => get(path`/v1/accounts/${a}/catalogs/${c.id}/namespaces`, { parent: parent ? nsParam(parent) : null, page_size: 50, page_token: token }),
      node,
      parent ? 'no child namespaces' : 'No namespaces yet.',
    );
  }
  return h('div', { class: 'two-pane' }, h('div', { class: 'pane-side tree' }, h('div', { class: 'pane-title' }, 'Namespaces'), namespaces(null)), pane);
}

function namespacePane(a, c, ns) {
  const seg = nsParam(ns.path);
  const relations = (kind) => pager({
    label: kind,
    pageSize: 25,
    emptyText: `No ${kind} in this namespace.`,
    load: (token, size) => get(path`/v1/accounts/${a}/catalogs/${c.id}/namespaces/${seg}/${kind}`, { page_size: size, page_token: token }),
    draw: (items) => table([
      [kind === 'tables' ? 'Table' : 'View', (r) => h('a', { href: href('a', a, 'catalogs', c.id, kind, seg, r.name), 'data-relation': r.name }, r.name)],
      ...(kind === 'tables' ? [['Format', (r) => (r.format ? badge(r.format, 'plain') : '')]] : [['Dialects', (r) => (r.definitions || []).map((d) => h('span', { class: 'chip' }, d.dialect))]]),
      ['Source', (r) => (r.managed_by ? badge('overlay', 'info') : h('span', { class: 'muted' }, 'direct'))],
      ['Updated', (r) => time(r.update_time)],
    ], items),
  });
  return h('div', { class: 'ns-pane' },
    h('div', { class: 'ns-head' }, h('h2', {}, nsPath(ns.path)), Object.keys(ns.properties || {}).length ? kv(ns.properties, { raw: true }) : null),
    h('h3', {}, 'Tables'), relations('tables'),
    h('h3', {}, 'Views'), relations('views'),
  );
}

// ---- one table or view -------------------------------------------------------------------

export async function relation(ctx, kind) {
  const a = ctx.account;
  const { catalog, ns, name } = ctx.params;
  const levels = ns.split('\u001f');
  const [c, r] = await Promise.all([
    get(path`/v1/accounts/${a}/catalogs/${catalog}`),
    get(path`/v1/accounts/${a}/catalogs/${catalog}/namespaces/${ns}/${kind}/${name}`),
  ]);
  const isView = kind === 'views';
  // Names for the provenance links; an unreadable one stays an id.
  const names = {};
  if (r.managed_by) {
    const m = r.managed_by;
    await Promise.all([
      get(path`/v1/accounts/${a}/overlays/${m.overlay_id}`).then((o) => { names.overlay = o.display_name; }, () => {}),
      get(path`/v1/accounts/${a}/integrations/${m.integration_id}`).then((i) => { names.integration = `${i.display_name} (${i.type})`; }, () => {}),
    ]);
  }
  const overview = kv(r, {
    order: isView ? ['kind', 'namespace', 'name', 'default_namespace', 'id'] : ['kind', 'namespace', 'name', 'format', 'location', 'metadata_location', 'id'],
    skip: ['schema', 'properties', 'managed_by', 'definitions', 'etag'],
    render: {
      namespace: (v) => nsPath(v),
      default_namespace: (v) => (v ? nsPath(v) : value(null)),
      location: (v) => (v ? mono(v) : value(null)),
      metadata_location: (v) => (v ? mono(v) : value(null)),
      id: (v) => mono(v),
      format: (v) => (v ? badge(v, 'plain') : value(null)),
    },
  });
  return {
    title: r.name,
    crumbs: [...accountCrumbs(a), ['Catalogs', href('a', a, 'catalogs')], [c.display_name, href('a', a, 'catalogs', c.id)], levels.join('.'), r.name],
    body: h('div', { class: 'grid' },
      card(isView ? 'View' : 'Table', overview),
      card('Provenance', provenance(a, r.managed_by, names)),
      isView ? card('SQL', definitions(r.definitions || [])) : null,
      card('Schema', schemaTree(r.schema)),
      card('Properties', Object.keys(r.properties || {}).length ? kv(r.properties, { raw: true }) : empty('No properties.')),
    ),
  };
}

function provenance(a, m, names) {
  if (!m) return h('p', { 'data-field': 'provenance' }, 'Created directly through the API; no overlay manages it.');
  return h('div', { 'data-field': 'provenance' },
    h('p', {}, 'Materialized by an overlay from an upstream catalog; it changes only through reconciliation.'),
    kv(m, {
      order: ['overlay_id', 'integration_id', 'upstream_namespace', 'upstream_name', 'external_id', 'stable'],
      render: {
        overlay_id: (v) => link(names.overlay || v, 'a', a, 'overlays', v),
        integration_id: (v) => link(names.integration || v, 'a', a, 'integrations', v),
        upstream_namespace: (v) => nsPath(v),
        upstream_name: (v) => mono(v),
        external_id: (v) => mono(v),
        stable: (v) => yesNo(v, 'good', 'warn'),
        upstream_fingerprint: (v) => (v ? mono(v) : value(null)),
      },
    }),
  );
}

function definitions(defs) {
  if (!defs.length) return empty('No definitions.');
  return h('div', { class: 'sql-list' }, defs.map((d) =>
    h('div', { class: 'sql', 'data-dialect': d.dialect },
      h('div', { class: 'sql-head' }, badge(d.dialect, 'info')),
      h('pre', { class: 'code' }, h('code', {}, d.sql)))));
}

/** An Iceberg schema as a tree: name, type, required or optional, field id, doc. */
export function schemaTree(schema) {
  if (!schema || !Array.isArray(schema.fields)) return h('pre', { class: 'code' }, h('code', {}, JSON.stringify(schema, null, 2)));
  if (schema.fields.length === 0) return empty('No columns.');
  return h('ul', { class: 'schema' }, schema.fields.map(fieldNode));
}

function typeLabel(t) {
  if (typeof t === 'string') return t;
  if (t && t.type === 'list') return `list<${typeLabel(t.element)}>`;
  if (t && t.type === 'map') return `map<${typeLabel(t.key)}, ${typeLabel(t.value)}>`;
  if (t && t.type === 'struct') return 'struct';
  return JSON.stringify(t);
}

function nested(t) {
  if (!t || typeof t !== 'object') return null;
  if (t.type === 'struct') return h('ul', { class: 'schema' }, (t.fields || []).map(fieldNode));
  if (t.type === 'list') {
    return h('ul', { class: 'schema' }, fieldNode({ id: t['element-id'], name: 'element', type: t.element, required: t['element-required'] }));
  }
  if (t.type === 'map') {
    return h('ul', { class: 'schema' },
      fieldNode({ id: t['key-id'], name: 'key', type: t.key, required: true }),
      fieldNode({ id: t['value-id'], name: 'value', type: t.value, required: t['value-required'] }));
  }
  return null;
}

function fieldNode(f) {
  return h('li', { class: 'schema-field' },
    h('div', { class: 'schema-row' },
      h('span', { class: 'fname' }, String(f.name)),
      h('span', { class: 'ftype' }, typeLabel(f.type)),
      f.required ? h('span', { class: 'freq' }, 'required') : h('span', { class: 'fopt' }, 'optional'),
      f.id !== undefined && f.id !== null ? h('span', { class: 'fid' }, `#${f.id}`) : null,
      f.doc ? h('span', { class: 'fdoc' }, String(f.doc)) : null,
    ),
    nested(f.type),
  );
}

// ---- directory health -------------------------------------------------------------------

function directory(a, c) {
  const out = h('div', {});
  const refresh = h('button', { type: 'button', class: 'secondary small' }, 'Refresh');
  async function load() {
    refresh.disabled = true;
    replace(out, progress('Refreshing the directory replica'));
    try {
      const d = await get(path`/v1/accounts/${a}/catalogs/${c.id}/directory`);
      const tables = d.entries.filter((e) => e.kind === 'TABLE').length;
      const views = d.entries.length - tables;
      const hl = d.health || {};
      replace(out,
        h('div', { class: 'health-summary' },
          hl.stale ? badge('stale', 'bad') : badge('fresh', 'good'),
          hl.mode ? badge(hl.mode) : null,
          h('span', {}, `${tables} table${tables === 1 ? '' : 's'}, ${views} view${views === 1 ? '' : 's'} in the directory`),
        ),
        kv(hl, {
          order: ['mode', 'stale', 'age_ms', 'taken_at', 'refreshed_at', 'consecutive_failures', 'last_error'],
          render: {
            stale: (v) => yesNo(v, 'bad', 'good'),
            age_ms: (v) => duration(v),
            consecutive_failures: (v) => h('span', { class: v ? 'num bad-text' : 'num' }, String(v)),
            last_error: (v) => (v ? h('span', { class: 'bad-text' }, v) : value(null)),
          },
        }),
      );
    } catch (err) {
      replace(out, errorBox(err, 'Could not read the directory'));
    } finally {
      refresh.disabled = false;
    }
  }
  refresh.addEventListener('click', load);
  load();
  return card(null, h('div', { class: 'card-actions' }, h('p', { class: 'muted' }, 'The query replica of this catalog\u2019s directory: how fresh it is and whether its refreshes fail.'), refresh), out);
}

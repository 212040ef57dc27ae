// Overlays: the list, creation, and one overlay (selection, the last run's outcome rendered
// key by key so fields the server adds appear too, and Reconcile / Pause / Resume).

import { h, replace, href, link } from '../dom.js';
import { get, post, call, path, all, privileges } from '../api.js';
import {
  card, pager, table, form, field, disclosure, mono, kv, value, badge, empty,
  act, parsePaths, problems, duration, InputError,
} from '../render.js';

const crumbs = (a, ...rest) => [[a, href('a', a, 'catalogs')], ['Overlays', href('a', a, 'overlays')], ...rest];

/** One line about a run: its outcome (when the server says one), counts and conflicts. */
function runSummary(r) {
  if (!r) return h('span', { class: 'muted' }, 'never run');
  const outcome = r.outcome ?? r.status ?? r.state;
  const conflicts = Array.isArray(r.conflicts) ? r.conflicts.length : 0;
  return h('span', { class: 'run-line' },
    outcome ? badge(String(outcome)) : null,
    r.tables ? h('span', {}, `${r.tables.created ?? 0} created, ${r.tables.updated ?? 0} updated, ${r.tables.retired ?? 0} retired tables`) : null,
    conflicts ? badge(`${conflicts} conflict${conflicts > 1 ? 's' : ''}`, 'bad') : null,
  );
}

export async function list(ctx) {
  const a = ctx.account;
  const overlays = pager({
    label: 'overlays',
    emptyText: 'No overlays yet: create one to materialize an integration into a catalog.',
    load: (token, size) => get(path`/v1/accounts/${a}/overlays`, { page_size: size, page_token: token }),
    draw: (items) => table([
      ['Overlay', (o) => link(o.display_name, 'a', a, 'overlays', o.id)],
      ['Integration', (o) => link(o.integration_id, 'a', a, 'integrations', o.integration_id)],
      ['Catalog', (o) => link(o.catalog_id, 'a', a, 'catalogs', o.catalog_id)],
      ['State', (o) => (o.paused ? badge('paused', 'warn') : badge('active', 'good'))],
      ['Last run', (o) => runSummary(o.last_reconcile)],
    ], items, (o) => ({ 'data-id': o.id })),
  });
  return {
    title: 'Overlays',
    crumbs: [[a, href('a', a, 'catalogs')], 'Overlays'],
    body: [
      h('p', { class: 'lead' }, 'An overlay binds an integration to a catalog and selects upstream namespaces; reconciliation keeps the catalog\u2019s copy of their tables and views current.'),
      card(null, overlays),
      disclosure('Create an overlay', createForm(a)),
    ],
  };
}

function createForm(a) {
  const name = h('input', { type: 'text', name: 'display_name', spellcheck: 'false' });
  const integration = h('select', { name: 'integration_id' }, h('option', { value: '' }, 'Loading…'));
  const catalog = h('select', { name: 'catalog_id' }, h('option', { value: '' }, 'Loading…'));
  const include = h('textarea', { name: 'include', rows: 2, spellcheck: 'false', placeholder: 'sales\nmarketing.eu' });
  const exclude = h('textarea', { name: 'exclude', rows: 2, spellcheck: 'false' });
  const interval = h('input', { type: 'number', name: 'refresh_interval_secs', min: 60, max: 2592000, placeholder: '3600' });
  const paused = h('input', { type: 'checkbox', name: 'paused' });
  const fill = async (select, p, label) => {
    try {
      const items = await all(p);
      replace(select, h('option', { value: '' }, `Choose ${label}`), items.map((x) => h('option', { value: x.id }, x.display_name)));
    } catch (err) {
      replace(select, h('option', { value: '' }, `Could not list ${label}s: ${err.message}`));
    }
  };
  fill(integration, path`/v1/accounts/${a}/integrations`, 'an integration');
  fill(catalog, path`/v1/accounts/${a}/catalogs`, 'a catalog');
  return form([
    field('Name', name),
    h('div', { class: 'row' }, field('Integration', integration), field('Target catalog', catalog)),
    h('div', { class: 'row' },
      field('Include namespaces', include, 'One per line, levels separated by dots (or a JSON array). Empty: everything.'),
      field('Exclude namespaces', exclude, 'One per line, as above.')),
    h('div', { class: 'row' }, field('Refresh interval (seconds)', interval, '60 to 2592000; default 3600.'), h('label', { class: 'field checkbox' }, paused, h('span', {}, 'Create paused'))),
  ], 'Create overlay', async () => {
    if (!integration.value) throw new InputError('Choose an integration.');
    if (!catalog.value) throw new InputError('Choose a target catalog.');
    const body = {
      display_name: name.value.trim(),
      integration_id: integration.value,
      catalog_id: catalog.value,
      include_namespaces: parsePaths(include.value),
      exclude_namespaces: parsePaths(exclude.value),
      paused: paused.checked,
    };
    if (interval.value) body.refresh_interval_secs = Number(interval.value);
    const o = await post(path`/v1/accounts/${a}/overlays`, body);
    location.hash = href('a', a, 'overlays', o.id);
  });
}

const KNOWN = ['id', 'display_name', 'integration_id', 'catalog_id', 'include_namespaces', 'exclude_namespaces',
  'refresh_interval_secs', 'paused', 'generation', 'last_reconcile', 'etag', 'create_time', 'update_time'];

export async function detail(ctx) {
  const a = ctx.account;
  const id = ctx.params.overlay;
  let o = await get(path`/v1/accounts/${a}/overlays/${id}`);
  const can = await privileges(a, { securable_type: 'OVERLAY', overlay_id: id });
  const names = { integration: o.integration_id, catalog: o.catalog_id };
  // Names for the links; an unreadable one just stays an id.
  await Promise.all([
    get(path`/v1/accounts/${a}/integrations/${o.integration_id}`).then((i) => { names.integration = i.display_name; }, () => {}),
    get(path`/v1/accounts/${a}/catalogs/${o.catalog_id}`).then((c) => { names.catalog = c.display_name; }, () => {}),
  ]);

  const overview = h('div', {});
  const status = h('div', {});
  const lastRun = h('div', { 'data-field': 'last-run' });
  function draw() {
    replace(overview, kv(o, {
      order: ['integration_id', 'catalog_id', 'include_namespaces', 'exclude_namespaces', 'refresh_interval_secs', 'paused', 'generation', 'id', 'create_time', 'update_time'],
      skip: [...KNOWN.filter((k) => !['integration_id', 'catalog_id', 'include_namespaces', 'exclude_namespaces', 'refresh_interval_secs', 'paused', 'generation', 'id', 'create_time', 'update_time'].includes(k)),
        ...Object.keys(o).filter((k) => !KNOWN.includes(k))],
      render: {
        integration_id: (v) => link(names.integration, 'a', a, 'integrations', v),
        catalog_id: (v) => link(names.catalog, 'a', a, 'catalogs', v),
        include_namespaces: (v) => (v.length ? value(v) : h('span', { class: 'muted' }, 'everything')),
        exclude_namespaces: (v) => (v.length ? value(v) : h('span', { class: 'muted' }, 'nothing')),
        refresh_interval_secs: (v) => duration(v * 1000),
        paused: (v) => (v ? badge('paused', 'warn') : badge('active', 'good')),
        id: (v) => mono(v),
      },
    }));
    // Status fields beyond the ones this console knows, rendered as they come.
    const extra = Object.fromEntries(Object.entries(o).filter(([k]) => !KNOWN.includes(k)));
    replace(status, Object.keys(extra).length ? card('Status', kv(extra)) : null);
    replace(lastRun, runReport(o.last_reconcile));
    pause.textContent = o.paused ? 'Resume' : 'Pause';
  }

  const out = h('div', { class: 'action-out' });
  const reconcile = h('button', { type: 'button', 'data-action': 'reconcile' }, 'Reconcile now');
  const pause = h('button', { type: 'button', class: 'secondary', 'data-action': 'pause' });
  reconcile.addEventListener('click', async () => {
    const summary = await act(reconcile, out, 'Reconciling with the upstream catalog', () => post(path`/v1/accounts/${a}/overlays/${id}/reconcile`));
    // Re-read the overlay whatever happened: a failed run may have recorded its cause.
    try {
      o = await get(path`/v1/accounts/${a}/overlays/${id}`);
    } catch {
      // keep what is shown
    }
    if (summary && !o.last_reconcile) o.last_reconcile = summary;
    draw();
    if (summary) replace(out, h('div', { class: 'notice good', role: 'status' }, 'Reconciliation finished. ', runSummary(summary)));
  });
  pause.addEventListener('click', async () => {
    const r = await act(pause, out, o.paused ? 'Resume' : 'Pause', () =>
      call('PATCH', path`/v1/accounts/${a}/overlays/${id}`, { body: { paused: !o.paused }, ifMatch: o.etag }));
    if (r) {
      o = r.data;
      draw();
    }
  });
  draw();
  return {
    title: o.display_name,
    crumbs: crumbs(a, o.display_name),
    actions: can.has('MANAGE') ? h('div', { class: 'head-actions' }, reconcile, pause) : null,
    body: h('div', { class: 'stack' },
      out,
      card('Last run', lastRun),
      status,
      card('Overlay', overview),
      h('p', { class: 'muted' }, 'Materialized relations are in ', link(names.catalog, 'a', a, 'catalogs', o.catalog_id), '.'),
    ),
  };
}

/** The last run, every key shown: counts as a grid, conflicts and skipped branches explained. */
function runReport(r) {
  if (!r) return empty('This overlay has not run yet. Reconcile it to materialize the upstream selection.');
  const kinds = ['namespaces', 'tables', 'views'].filter((k) => r[k] && typeof r[k] === 'object');
  const shown = new Set(kinds);
  const parts = [];
  const outcome = r.outcome ?? null;
  if (outcome !== null) {
    shown.add('outcome');
    parts.push(h('div', { class: 'run-outcome' }, h('span', { class: 'muted' }, 'Outcome '), badge(String(outcome))));
  }
  if (kinds.length) {
    parts.push(h('table', { class: 'data counts-table' },
      h('thead', {}, h('tr', {}, h('th', {}, ''), ['created', 'updated', 'unchanged', 'retired'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, kinds.map((k) => h('tr', { 'data-kind': k }, h('th', { scope: 'row' }, k),
        ['created', 'updated', 'unchanged', 'retired'].map((c) => h('td', { class: r[k][c] ? 'num nonzero' : 'num' }, String(r[k][c] ?? 0))))))));
  }
  for (const key of ['conflicts', 'skipped']) {
    if (!Array.isArray(r[key])) continue;
    shown.add(key);
    parts.push(h('div', { class: 'run-section', 'data-field': key },
      h('h3', {}, key === 'conflicts' ? `Conflicts (${r[key].length})` : `Skipped branches (${r[key].length})`),
      r[key].length ? problems(r[key]) : h('p', { class: 'muted' }, key === 'conflicts' ? 'No conflicts.' : 'Nothing skipped.')));
  }
  const rest = Object.fromEntries(Object.entries(r).filter(([k]) => !shown.has(k)));
  if (Object.keys(rest).length) parts.push(kv(rest, { order: ['error', 'cause', 'started_at', 'duration_ms'] }));
  return h('div', { class: 'run-report' }, parts);
}

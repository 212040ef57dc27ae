// Integrations: the list, creation, and one integration (configuration, Validate, upstream
// browsing, credential rotation, the overlays that use it). Secrets typed here go to the API
// once and are cleared from the form; the API never answers them back.

import { h, replace, href, link } from '../dom.js';
import { get, post, call, path, nsParam, privileges } from '../api.js';
import {
  card, pager, table, time, form, field, disclosure, mono, kv, value, badge, nsPath, more,
  empty, yesNo, act, parseProperties, InputError,
} from '../render.js';

const AUTH = {
  OAUTH_CLIENT_CREDENTIALS: {
    label: 'OAuth2 client credentials',
    fields: [['client_id', 'Client id', true], ['token_uri', 'Token URI'], ['scopes', 'Scopes (space separated)']],
    secrets: [['client_secret', 'Client secret']],
  },
  BEARER: { label: 'Bearer token', fields: [], secrets: [['token', 'Token']] },
  AWS_ASSUME_ROLE: {
    label: 'AWS assume role',
    fields: [['role_arn', 'Role ARN', true], ['external_id', 'External id'], ['session_name', 'Session name'], ['region', 'Region']],
    secrets: [],
  },
  AWS_ACCESS_KEYS: {
    label: 'AWS access keys',
    fields: [['access_key_id', 'Access key id', true], ['region', 'Region']],
    secrets: [['secret_access_key', 'Secret access key'], ['session_token', 'Session token']],
  },
  AWS_SIGV4: {
    label: 'AWS SigV4',
    fields: [['region', 'Region', true], ['signing_name', 'Signing name'], ['credential_source', 'Credential source (STATIC or AMBIENT)'], ['access_key_id', 'Access key id']],
    secrets: [['secret_access_key', 'Secret access key'], ['session_token', 'Session token']],
  },
};

const TYPES = {
  ICEBERG_REST: ['OAUTH_CLIENT_CREDENTIALS', 'BEARER', 'AWS_SIGV4', 'AWS_ACCESS_KEYS', 'AWS_ASSUME_ROLE'],
  UNITY: ['OAUTH_CLIENT_CREDENTIALS', 'BEARER'],
  DELTA_SHARING: ['BEARER'],
};

const crumbs = (a, ...rest) => [[a, href('a', a, 'catalogs')], ['Integrations', href('a', a, 'integrations')], ...rest];

export async function list(ctx) {
  const a = ctx.account;
  const integrations = pager({
    label: 'integrations',
    emptyText: 'No integrations yet: create one to connect an upstream catalog.',
    load: (token, size) => get(path`/v1/accounts/${a}/integrations`, { page_size: size, page_token: token }),
    draw: (items) => table([
      ['Integration', (i) => link(i.display_name, 'a', a, 'integrations', i.id)],
      ['Type', (i) => badge(i.type, 'info')],
      ['URI', (i) => mono(i.uri)],
      ['Authentication', (i) => i.authentication?.type ?? ''],
      ['Credential generation', (i) => String(i.credential_generation)],
      ['State', (i) => (i.paused ? badge('paused', 'warn') : badge('active', 'good'))],
    ], items, (i) => ({ 'data-id': i.id })),
  });
  return {
    title: 'Integrations',
    crumbs: crumbs(a).slice(0, 1).concat(['Integrations']),
    body: [
      h('p', { class: 'lead' }, 'An integration connects an upstream catalog (Iceberg REST, Unity Catalog or Delta Sharing); overlays materialize its namespaces into Flotilla catalogs.'),
      card(null, integrations),
      (await privileges(a)).has('INTEGRATION_CREATE') ? disclosure('Create an integration', createForm(a)) : null,
    ],
  };
}

function authInputs(type, holder, secretHolder) {
  const spec = AUTH[type];
  const inputs = {};
  const secrets = {};
  replace(holder, spec.fields.map(([k, label, req]) => {
    inputs[k] = h('input', { type: 'text', name: `auth_${k}`, spellcheck: 'false', 'data-required': req ? 'true' : null });
    return field(req ? label : `${label} (optional)`, inputs[k]);
  }));
  replace(secretHolder, spec.secrets.map(([k, label]) => {
    secrets[k] = h('input', { type: 'password', name: `secret_${k}`, autocomplete: 'off' });
    return field(label, secrets[k], 'Write-only: stored in the credential store, never shown again.');
  }));
  return { inputs, secrets };
}

function collectAuth(type, inputs) {
  const auth = { type };
  for (const [k, label, req] of AUTH[type].fields) {
    const v = inputs[k].value.trim();
    if (!v) {
      if (req) throw new InputError(`${label} is required.`);
      continue;
    }
    auth[k] = k === 'scopes' ? v.split(/\s+/) : v;
  }
  return auth;
}

function collectSecrets(secrets) {
  const out = {};
  for (const [k, input] of Object.entries(secrets)) if (input.value) out[k] = input.value;
  return Object.keys(out).length ? out : null;
}

function clearSecrets(secrets) {
  for (const input of Object.values(secrets)) input.value = '';
}

function createForm(a) {
  const name = h('input', { type: 'text', name: 'display_name', spellcheck: 'false' });
  const type = h('select', { name: 'type' }, Object.keys(TYPES).map((t) => h('option', { value: t }, t)));
  const uri = h('input', { type: 'url', name: 'uri', spellcheck: 'false', placeholder: 'https://catalog.example.com' });
  const authType = h('select', { name: 'auth_type' });
  const props = h('textarea', { name: 'properties', rows: 2, spellcheck: 'false', placeholder: 'warehouse=prod' });
  const authFields = h('div', { class: 'field-group' });
  const secretFields = h('div', { class: 'field-group' });
  let current = null;
  function syncTypes() {
    replace(authType, TYPES[type.value].map((t) => h('option', { value: t }, AUTH[t].label)));
    syncAuth();
  }
  function syncAuth() {
    current = authInputs(authType.value, authFields, secretFields);
  }
  type.addEventListener('change', syncTypes);
  authType.addEventListener('change', syncAuth);
  syncTypes();
  return form([
    h('div', { class: 'row' }, field('Name', name), field('Type', type)),
    field('Upstream URI', uri),
    field('Properties', props, 'key=value per line, e.g. the upstream warehouse or Unity catalog name.'),
    field('Authentication', authType),
    authFields,
    secretFields,
  ], 'Create integration', async () => {
    const body = {
      display_name: name.value.trim(),
      type: type.value,
      uri: uri.value.trim(),
      properties: parseProperties(props.value),
      authentication: collectAuth(authType.value, current.inputs),
    };
    const creds = collectSecrets(current.secrets);
    if (creds) body.credentials = creds;
    try {
      const i = await post(path`/v1/accounts/${a}/integrations`, body);
      location.hash = href('a', a, 'integrations', i.id);
    } finally {
      clearSecrets(current.secrets);
    }
  });
}

export async function detail(ctx) {
  const a = ctx.account;
  const id = ctx.params.integration;
  let integ = await get(path`/v1/accounts/${a}/integrations/${id}`);
  const can = await privileges(a, { securable_type: 'INTEGRATION', integration_id: id });
  const overview = h('div', {});
  const drawOverview = () => replace(overview, kv(integ, {
    order: ['type', 'uri', 'authentication', 'credentials_configured', 'credential_generation', 'generation', 'paused', 'properties', 'id', 'create_time', 'update_time'],
    skip: ['display_name', 'etag'],
    render: {
      type: (v) => badge(v, 'info'),
      uri: (v) => mono(v),
      authentication: (v) => kv(v, { order: ['type'] }),
      properties: (v) => kv(v, { raw: true }),
      credentials_configured: (v) => yesNo(v, 'good', 'warn'),
      paused: (v) => (v ? badge('paused', 'warn') : badge('active', 'good')),
      id: (v) => mono(v),
    },
  }));
  drawOverview();

  const status = h('div', { class: 'action-out' });
  const pause = h('button', { type: 'button', class: 'secondary', 'data-action': 'pause' });
  const syncPause = () => { pause.textContent = integ.paused ? 'Resume' : 'Pause'; };
  syncPause();
  pause.addEventListener('click', async () => {
    const r = await act(pause, status, integ.paused ? 'Resume' : 'Pause', () =>
      call('PATCH', path`/v1/accounts/${a}/integrations/${id}`, { body: { paused: !integ.paused }, ifMatch: integ.etag }));
    if (r) {
      integ = r.data;
      drawOverview();
      syncPause();
    }
  });

  return {
    title: integ.display_name,
    crumbs: crumbs(a, integ.display_name),
    actions: can.has('MANAGE') ? h('div', { class: 'head-actions' }, pause, status) : null,
    body: h('div', { class: 'stack' },
      card('Configuration', overview),
      card('Validation', validation(a, id)),
      card('Upstream catalog', upstream(a, id)),
      card('Overlays using this integration', pager({
        label: 'overlays',
        emptyText: 'No overlay uses this integration yet.',
        load: (token, size) => get(path`/v1/accounts/${a}/overlays`, { integration_id: id, page_size: size, page_token: token }),
        draw: (items) => table([
          ['Overlay', (o) => link(o.display_name, 'a', a, 'overlays', o.id)],
          ['Catalog', (o) => link(o.catalog_id, 'a', a, 'catalogs', o.catalog_id)],
          ['State', (o) => (o.paused ? badge('paused', 'warn') : badge('active', 'good'))],
        ], items),
      })),
      disclosure('Rotate credentials', rotateForm(a, id, () => integ, (v) => { integ = v; drawOverview(); })),
    ),
  };
}

function validation(a, id) {
  const ns = h('input', { type: 'text', name: 'namespace', spellcheck: 'false', placeholder: 'e.g. sales.eu' });
  const tbl = h('input', { type: 'text', name: 'table', spellcheck: 'false' });
  const run = h('button', { type: 'button', 'data-action': 'validate' }, 'Validate');
  const out = h('div', { class: 'validation-out' }, empty('Validation connects to the upstream catalog, authenticates, discovers a table, asks for vended credentials and reads storage.'));
  run.addEventListener('click', async () => {
    const query = {};
    if (ns.value.trim()) query.namespace = nsParam(ns.value.trim().split('.'));
    if (tbl.value.trim()) query.table = tbl.value.trim();
    const report = await act(run, out, 'Validating against the upstream catalog', () => post(path`/v1/accounts/${a}/integrations/${id}/validate`, undefined, query));
    if (report) replace(out, validationReport(report));
  });
  return h('div', {},
    h('div', { class: 'row align-end' }, field('Namespace (optional)', ns), field('Table (optional)', tbl), h('div', { class: 'row-action' }, run)),
    out);
}

export function validationReport(report) {
  return h('div', { class: 'report', 'data-valid': String(report.valid) },
    h('div', { class: `banner ${report.valid ? 'good' : 'bad'}` }, report.valid ? 'All checks passed' : 'The integration is not valid'),
    table([
      ['Check', (c) => h('span', { class: 'check-type' }, c.type)],
      ['Status', (c) => badge(c.status)],
      ['Issue', (c) => (c.issue ? badge(c.issue, 'bad') : value(null))],
      ['Summary', (c) => h('span', { class: 'text' }, c.summary ?? '')],
    ], report.checks || [], (c) => ({ 'data-check': c.type, 'data-status': c.status })),
    extraFields(report, ['valid', 'checks']),
  );
}

/** The fields of `obj` other than `known`, key by key (nothing when there are none). */
function extraFields(obj, known) {
  const rest = Object.fromEntries(Object.entries(obj).filter(([k]) => !known.includes(k)));
  return Object.keys(rest).length ? kv(rest) : null;
}

function upstream(a, id) {
  const pane = h('div', { class: 'pane-main' }, empty('Select an upstream namespace to list its tables and views.'));
  let selected = null;
  function node(ns) {
    const levels = ns.path;
    const children = h('div', { class: 'tree-children', hidden: true });
    const toggle = h('button', { type: 'button', class: 'tree-toggle', 'aria-expanded': 'false', 'aria-label': 'Expand' }, '▸');
    const name = h('button', { type: 'button', class: 'tree-name', 'data-upstream-ns': levels.join('.') }, levels[levels.length - 1]);
    let loaded = false;
    toggle.addEventListener('click', () => {
      const open = children.hidden;
      children.hidden = !open;
      toggle.textContent = open ? '▾' : '▸';
      toggle.setAttribute('aria-expanded', String(open));
      if (open && !loaded) {
        loaded = true;
        children.append(namespaces(levels));
      }
    });
    name.addEventListener('click', () => {
      if (selected) selected.classList.remove('selected');
      selected = name;
      name.classList.add('selected');
      replace(pane, h('h3', {}, nsPath(levels)), pager({
        label: 'objects',
        pageSize: 25,
        emptyText: 'No tables or views here.',
        load: (token, size) => get(path`/v1/accounts/${a}/integrations/${id}/upstream/objects`, { namespace: nsParam(levels), kinds: 'table,view', page_size: size, page_token: token }),
        draw: (items) => table([
          ['Name', (o) => h('span', { class: 'text', 'data-upstream-object': '' }, o.name)],
          ['Kind', (o) => badge(o.kind, 'plain')],
        ], items),
      }));
    });
    return h('li', {}, h('div', { class: 'tree-row' }, toggle, name), children);
  }
  function namespaces(parent) {
    return more(
      (token) => get(path`/v1/accounts/${a}/integrations/${id}/upstream/namespaces`, { parent: parent ? nsParam(parent) : null, page_size: 25, page_token: token }),
      node,
      parent ? 'no child namespaces' : 'The upstream catalog lists no namespaces.',
    );
  }
  const tree = h('div', { class: 'pane-side tree' }, h('div', { class: 'pane-title' }, 'Upstream namespaces'));
  const load = h('button', { type: 'button', class: 'secondary small', 'data-action': 'browse-upstream' }, 'Browse the upstream catalog');
  load.addEventListener('click', () => {
    load.remove();
    tree.append(namespaces(null));
  });
  tree.append(load);
  return h('div', { class: 'two-pane' }, tree, pane);
}

function rotateForm(a, id, getInteg, setInteg) {
  const holder = h('div', {});
  const authFields = h('div', { class: 'field-group', hidden: true });
  let current = null;
  const sync = () => { current = authInputs(getInteg().authentication.type, authFields, holder); };
  sync();
  return form([
    h('p', { class: 'muted' }, 'New secrets replace the current ones; the credential generation increases and the previous generation is retained until swept.'),
    holder,
  ], 'Rotate', async () => {
    const creds = collectSecrets(current.secrets);
    if (!creds) throw new InputError('Enter the new secret.');
    try {
      const r = await call('PUT', path`/v1/accounts/${a}/integrations/${id}/authentication`, { body: { credentials: creds } });
      setInteg(r.data);
    } finally {
      clearSecrets(current.secrets);
    }
  });
}

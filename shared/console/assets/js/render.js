// Shared presentation pieces: generic rendering of API values (so fields the server adds
// later still appear), badges, key/value tables, errors, paged lists and progress.

import { h, append, replace } from './dom.js';
import { ApiError } from './api.js';

const LABELS = {
  uri: 'URI',
  id: 'Id',
  duration_ms: 'Duration',
  age_ms: 'Age',
  refresh_interval_secs: 'Refresh interval',
  integration_id: 'Integration',
  catalog_id: 'Catalog',
  overlay_id: 'Overlay',
  external_id: 'External id',
  create_time: 'Created',
  update_time: 'Updated',
};

/** `credential_generation` → `Credential generation`. */
export function humanize(key) {
  if (Object.hasOwn(LABELS, key)) return LABELS[key];
  const s = String(key).replace(/_/g, ' ');
  return s.charAt(0).toUpperCase() + s.slice(1);
}

const TONES = {
  good: ['PASSED', 'SUCCEEDED', 'SUCCESS', 'OK', 'ACTIVE', 'AUTHORITATIVE', 'FRESH', 'VALID', 'COMPLETED'],
  bad: ['FAILED', 'FAILURE', 'ERROR', 'STALE', 'INVALID', 'MAPPING_CONFLICT', 'CONFLICT'],
  warn: ['PARTIAL', 'NOT_RUN', 'PAUSED', 'SKIPPED', 'RETRYING', 'DEGRADED'],
};

/** A status word as a coloured badge (tone guessed from the word unless given). */
export function badge(text, tone) {
  const t = String(text);
  const word = t.toUpperCase();
  const found = tone || Object.keys(TONES).find((k) => TONES[k].includes(word)) || 'plain';
  return h('span', { class: `badge ${found}` }, t);
}

export function yesNo(v, yesTone = 'good', noTone = 'plain') {
  return badge(v ? 'yes' : 'no', v ? yesTone : noTone);
}

/** A namespace path (array of levels), one chip per level. */
export function nsPath(levels) {
  if (!Array.isArray(levels) || levels.length === 0) return h('span', { class: 'muted' }, '(root)');
  return h('span', { class: 'path' }, levels.map((l) => h('span', { class: 'seg' }, String(l))));
}

/** A timestamp in the viewer's locale, the exact value as a tooltip. */
export function time(ts) {
  if (!ts) return h('span', { class: 'muted' }, '—');
  const d = new Date(ts);
  if (Number.isNaN(d.getTime())) return h('span', {}, String(ts));
  return h('time', { datetime: String(ts), title: String(ts) }, d.toLocaleString());
}

export function duration(ms) {
  const n = Number(ms);
  if (!Number.isFinite(n)) return String(ms);
  if (n < 1000) return `${n} ms`;
  if (n < 120000) return `${(n / 1000).toFixed(1)} s`;
  return `${Math.round(n / 60000)} min`;
}

export function mono(text) {
  return h('code', { class: 'mono' }, String(text));
}

const isCounts = (v) =>
  v && typeof v === 'object' && !Array.isArray(v) &&
  ['created', 'updated', 'unchanged', 'retired'].every((k) => typeof v[k] === 'number');

const isPathList = (v) =>
  Array.isArray(v) && v.length > 0 && v.every((p) => Array.isArray(p) && p.every((s) => typeof s === 'string'));

/** Renders any JSON value readably, key by key. `key` tunes a few well-known shapes. */
export function value(v, key) {
  if (v === null || v === undefined) return h('span', { class: 'muted' }, '—');
  if (typeof v === 'boolean') return yesNo(v);
  if (typeof v === 'number') {
    if (key && /(^|_)ms$/.test(key)) return h('span', {}, duration(v));
    return h('span', { class: 'num' }, String(v));
  }
  if (typeof v === 'string') {
    if (key && /(_time|_at)$/.test(key)) return time(v);
    if (key && /^(outcome|status|state|mode|code|issue|result)$/.test(key)) return badge(v);
    return h('span', { class: 'text' }, v);
  }
  if (Array.isArray(v)) {
    if (v.length === 0) return h('span', { class: 'muted' }, 'none');
    if (isPathList(v)) return h('ul', { class: 'plain' }, v.map((p) => h('li', {}, nsPath(p))));
    if (v.every((x) => x === null || typeof x !== 'object')) {
      return h('span', {}, v.map((x) => h('span', { class: 'chip' }, x === null ? '—' : String(x))));
    }
    if (v.every((x) => x && typeof x === 'object' && 'reason' in x)) return problems(v);
    return h('ol', { class: 'plain' }, v.map((x) => h('li', {}, value(x))));
  }
  if (isCounts(v)) return counts(v);
  if (key === 'properties') return kv(v, { raw: true });
  return kv(v);
}

/** An object as a two-column table, every key shown (in `order` first, `skip` left out).
 *  `raw`: the keys are data (properties), shown as they are. */
export function kv(obj, { order = [], skip = [], render = {}, raw = false } = {}) {
  const keys = [...order.filter((k) => k in obj), ...Object.keys(obj).filter((k) => !order.includes(k))]
    .filter((k) => !skip.includes(k));
  if (keys.length === 0) return h('span', { class: 'muted' }, 'none');
  return h(
    'table',
    { class: 'kv' },
    h('tbody', {}, keys.map((k) =>
      h('tr', { 'data-key': k }, h('th', { scope: 'row', class: raw ? 'raw-key' : null }, raw ? k : humanize(k)),
        h('td', {}, render[k] ? render[k](obj[k], obj) : raw ? h('span', { class: 'text' }, String(obj[k])) : value(obj[k], k))),
    )),
  );
}

/** Reconcile counts: created / updated / unchanged / retired. */
export function counts(c) {
  return h('span', { class: 'counts' },
    ['created', 'updated', 'unchanged', 'retired'].map((k) =>
      h('span', { class: `count ${k}${c[k] ? ' nonzero' : ''}`, title: k }, h('b', {}, String(c[k])), ` ${k}`)),
  );
}

const EXPLAIN = {
  MAPPING_CONFLICT:
    'This object cannot be mapped: its destination in the catalog is already taken, or the upstream described it in a way that cannot be mapped. A run with a conflict publishes nothing; resolve it and run again.',
};

/** Conflicts and skipped branches: the path, the code and the reason, explained. */
export function problems(list) {
  return h('ul', { class: 'problems' }, list.map((p) => {
    const code = p.code ? String(p.code) : null;
    return h('li', { class: 'problem' },
      h('div', { class: 'problem-head' }, code ? badge(code, 'bad') : badge('skipped', 'warn'), ' ', p.path ? nsPath(p.path) : null),
      h('div', { class: 'problem-reason' }, String(p.reason ?? '')),
      code && EXPLAIN[code] ? h('div', { class: 'problem-explain muted' }, EXPLAIN[code]) : null,
      kvExtra(p, ['path', 'code', 'reason']),
    );
  }));
}

function kvExtra(obj, known) {
  const rest = Object.fromEntries(Object.entries(obj).filter(([k]) => !known.includes(k)));
  return Object.keys(rest).length ? kv(rest) : null;
}

/** A message for an error: the API's own message and code, never a stack. */
export function errorBox(err, context) {
  const isApi = err instanceof ApiError;
  const msg = isApi ? err.message : 'Something went wrong in the console.';
  const box = h('div', { class: 'error', role: 'alert' },
    h('strong', {}, context || 'Request failed'),
    isApi && err.status ? h('span', { class: 'error-code' }, ` ${err.status} ${err.code}`) : null,
    h('div', { class: 'error-message' }, msg),
  );
  if (!isApi) console.error(err);
  return box;
}

export function card(title, ...body) {
  return h('section', { class: 'card' }, title ? h('h2', {}, title) : null, ...body);
}

export function empty(text) {
  return h('p', { class: 'empty' }, text);
}

/** Indeterminate progress with the elapsed time, for operations that run on the server. */
export function progress(label) {
  const started = Date.now();
  const elapsed = h('span', { class: 'elapsed' }, '0 s');
  const el = h('div', { class: 'progress', role: 'status' },
    h('progress', {}), h('span', {}, label), elapsed);
  const timer = setInterval(() => {
    if (!el.isConnected) return clearInterval(timer);
    elapsed.textContent = `${Math.floor((Date.now() - started) / 1000)} s`;
  }, 500);
  el.stop = () => clearInterval(timer);
  return el;
}

/** Runs `fn` for a button: disables it, shows progress in `out`, then the result or error. */
export async function act(button, out, label, fn) {
  button.disabled = true;
  const p = progress(label);
  replace(out, p);
  try {
    const result = await fn();
    replace(out);
    return result;
  } catch (err) {
    replace(out, errorBox(err, `${label} failed`));
    return undefined;
  } finally {
    p.stop();
    button.disabled = false;
  }
}

/** A paged list. `load(pageToken, pageSize)` answers `{items, next_page_token}`; `draw(items)`
 *  answers the node showing them. Previous pages are revisited with their own tokens. */
export function pager({ load, draw, pageSize = 25, emptyText = 'Nothing here yet.', label = 'items' }) {
  const root = h('div', { class: 'pager' });
  const body = h('div', { class: 'pager-body' });
  const status = h('span', { class: 'pager-status muted' });
  const prev = h('button', { class: 'secondary small', type: 'button', 'data-action': 'previous-page' }, '← Previous');
  const next = h('button', { class: 'secondary small', type: 'button', 'data-action': 'next-page' }, 'Next →');
  const size = h('select', { class: 'small', 'aria-label': 'Page size' },
    [10, 25, 50, 100].map((n) => h('option', { value: String(n) }, `${n} per page`)));
  size.value = String(pageSize);
  const tokens = [null];
  let index = 0;
  let nextToken = null;
  append(root, body, h('div', { class: 'pager-controls' }, prev, status, next, size));

  async function show() {
    prev.disabled = true;
    next.disabled = true;
    replace(body, progress(`Loading ${label}`));
    try {
      const page = await load(tokens[index], Number(size.value));
      const items = page.items || [];
      nextToken = page.next_page_token || null;
      replace(body, items.length ? draw(items) : empty(index === 0 ? emptyText : 'No more items.'));
      status.textContent = `Page ${index + 1}${items.length ? ` · ${items.length} ${label}` : ''}`;
    } catch (err) {
      replace(body, errorBox(err, `Could not load ${label}`));
      nextToken = null;
    }
    prev.disabled = index === 0;
    next.disabled = !nextToken;
  }
  prev.addEventListener('click', () => {
    if (index > 0) {
      index -= 1;
      show();
    }
  });
  next.addEventListener('click', () => {
    if (nextToken) {
      tokens[index + 1] = nextToken;
      index += 1;
      show();
    }
  });
  size.addEventListener('change', () => {
    tokens.length = 1;
    index = 0;
    show();
  });
  root.reload = () => {
    tokens.length = 1;
    index = 0;
    return show();
  };
  show();
  return root;
}

/** A data table: `columns` of `[heading, item => node|string]`. */
export function table(columns, items, rowAttrs) {
  return h('table', { class: 'data' },
    h('thead', {}, h('tr', {}, columns.map(([title]) => h('th', { scope: 'col' }, title)))),
    h('tbody', {}, items.map((it) => h('tr', rowAttrs ? rowAttrs(it) : {}, columns.map(([, f]) => h('td', {}, f(it)))))),
  );
}

/** A labelled form field. */
export function field(label, input, hint) {
  return h('label', { class: 'field' }, h('span', { class: 'field-label' }, label), input, hint ? h('span', { class: 'hint' }, hint) : null);
}

/** A mistake in what the user typed (shown as such, not as a failure). */
export class InputError extends Error {}

/** Properties typed as `key=value` lines. */
export function parseProperties(text) {
  const props = {};
  for (const line of String(text).split('\n')) {
    const t = line.trim();
    if (!t) continue;
    const i = t.indexOf('=');
    if (i <= 0) throw new InputError(`"${t}" is not key=value`);
    props[t.slice(0, i).trim()] = t.slice(i + 1).trim();
  }
  return props;
}

/** Namespace paths typed one per line: levels separated by dots, or a JSON array. */
export function parsePaths(text) {
  const out = [];
  for (const line of String(text).split('\n')) {
    const t = line.trim();
    if (!t) continue;
    if (t.startsWith('[')) {
      let arr;
      try {
        arr = JSON.parse(t);
      } catch {
        throw new InputError(`${t} is not a JSON array of strings`);
      }
      if (!Array.isArray(arr) || !arr.every((s) => typeof s === 'string')) throw new InputError(`${t} is not a JSON array of strings`);
      out.push(arr);
    } else {
      out.push(t.split('.'));
    }
  }
  return out;
}

/** A form whose submit runs `fn(form)` with progress and error display; local validation
 *  errors (thrown plain Errors) are shown as such. */
export function form(fields, submitLabel, fn, { cls = '' } = {}) {
  const out = h('div', { class: 'form-out' });
  const submit = h('button', { type: 'submit' }, submitLabel);
  const f = h('form', { class: `form ${cls}`, novalidate: true }, fields, h('div', { class: 'form-actions' }, submit), out);
  f.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    submit.disabled = true;
    const p = progress(`${submitLabel}…`);
    replace(out, p);
    try {
      await fn(f);
      replace(out);
    } catch (err) {
      replace(out, err instanceof InputError
        ? h('div', { class: 'error', role: 'alert' }, h('strong', {}, 'Check the form'), h('div', { class: 'error-message' }, err.message))
        : errorBox(err, `${submitLabel} failed`));
    } finally {
      p.stop();
      submit.disabled = false;
    }
  });
  return f;
}

/** A collapsible "Create …" panel. */
export function disclosure(title, content, open = false) {
  return h('details', { class: 'disclosure', open }, h('summary', {}, title), h('div', { class: 'disclosure-body' }, content));
}

/** Tabs: `[[label, key, build]]`; a panel is built the first time it is shown. */
export function tabs(list, initial) {
  const bar = h('div', { class: 'tabs', role: 'tablist' });
  const panels = h('div', { class: 'tab-panels' });
  const built = new Map();
  const buttons = list.map(([label, key]) => h('button', { type: 'button', role: 'tab', class: 'tab', 'data-tab': key }, label));
  function show(key) {
    list.forEach(([, k, build], i) => {
      const on = k === key;
      buttons[i].classList.toggle('active', on);
      buttons[i].setAttribute('aria-selected', String(on));
      if (on && !built.has(k)) {
        const panel = h('div', { class: 'tab-panel', role: 'tabpanel', 'data-panel': k }, build());
        built.set(k, panel);
        panels.append(panel);
      }
      if (built.has(k)) built.get(k).hidden = !on;
    });
  }
  buttons.forEach((b, i) => b.addEventListener('click', () => show(list[i][1])));
  append(bar, buttons);
  show(initial || list[0][1]);
  return h('div', { class: 'tabbed' }, bar, panels);
}

/** A "load more" list for tree nodes: `load(token)` answers a page; `item(x)` a node. */
export function more(load, item, emptyText) {
  const ul = h('ul', { class: 'tree-list' });
  const foot = h('div', { class: 'tree-foot' });
  let token = null;
  async function step() {
    replace(foot, progress('Loading'));
    try {
      const page = await load(token);
      const items = page.items || [];
      if (!token && items.length === 0 && emptyText) append(ul, h('li', { class: 'muted tree-empty' }, emptyText));
      items.forEach((x) => ul.append(item(x)));
      token = page.next_page_token || null;
      replace(foot, token ? h('button', { type: 'button', class: 'link-button small', 'data-action': 'more', onclick: step }, 'Show more') : null);
    } catch (err) {
      replace(foot, errorBox(err, 'Could not load'));
    }
  }
  step();
  return h('div', { class: 'tree-block' }, ul, foot);
}

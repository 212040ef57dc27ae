// The console's only way to the server: the JSON API under /v1, with the bearer token the
// user entered for this browser tab. The token lives in sessionStorage (gone when the tab
// closes), never in persistent storage or a cookie, and is sent only in the Authorization header.

const SESSION_KEY = 'flotilla.console.session';

/** The API root, relative to the page (`<root>/console/` → `<root>/`). */
export const API_ROOT = new URL('../', document.baseURI);

/** The Iceberg REST base URI that engines are given. */
export function icebergBase() {
  return new URL('iceberg', API_ROOT).href;
}

export const session = {
  /** `{token, operator, account}` or null. */
  get() {
    try {
      const s = JSON.parse(sessionStorage.getItem(SESSION_KEY));
      return s && typeof s.token === 'string' ? s : null;
    } catch {
      return null;
    }
  },
  set(s) {
    sessionStorage.setItem(SESSION_KEY, JSON.stringify(s));
  },
  clear() {
    sessionStorage.removeItem(SESSION_KEY);
  },
};

/** A refusal or failure, carrying the API's code and message (never a stack trace). */
export class ApiError extends Error {
  constructor(status, code, message, details) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
    this.details = details || {};
  }
}

/** Builds an API path from a template, percent-encoding every interpolated value:
 *  ``path`/v1/accounts/${a}/catalogs/${c}` `` */
export function path(strings, ...values) {
  let out = strings[0];
  values.forEach((v, i) => {
    out += encodeURIComponent(String(v)) + strings[i + 1];
  });
  return out;
}

/** A namespace path as one URL segment value: levels joined by U+001F. */
export function nsParam(levels) {
  return levels.join('\u001f');
}

/** Calls the API. `query` entries that are null/undefined/'' are left out. Resolves to the
 *  parsed JSON body (null for 204) and the response's ETag; rejects with an ApiError. */
export async function call(method, apiPath, { query, body, ifMatch, token } = {}) {
  const url = new URL(apiPath.replace(/^\//, ''), API_ROOT);
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== undefined && v !== null && v !== '') url.searchParams.set(k, String(v));
  }
  const s = session.get();
  const bearer = token ?? s?.token;
  const headers = { Accept: 'application/json' };
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (ifMatch) headers['If-Match'] = ifMatch;
  let resp;
  try {
    resp = await fetch(url, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'omit',
      cache: 'no-store',
    });
  } catch {
    throw new ApiError(0, 'NETWORK', 'The Flotilla API could not be reached.');
  }
  let data = null;
  const text = await resp.text().catch(() => '');
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (!resp.ok) {
    const e = data && typeof data === 'object' ? data.error : null;
    const err =
      e && typeof e.message === 'string'
        ? new ApiError(resp.status, String(e.code || resp.status), e.message, e.details)
        : new ApiError(resp.status, `HTTP_${resp.status}`, `The server answered HTTP ${resp.status}.`);
    if (resp.status === 401 && !token) {
      window.dispatchEvent(new CustomEvent('flotilla:unauthenticated', { detail: err.message }));
    }
    throw err;
  }
  return { data, etag: resp.headers.get('ETag') || data?.etag || null };
}

export async function get(apiPath, query) {
  return (await call('GET', apiPath, { query })).data;
}

export async function post(apiPath, body, query) {
  return (await call('POST', apiPath, { body, query })).data;
}

export async function patch(apiPath, body, ifMatch) {
  return (await call('PATCH', apiPath, { body, ifMatch })).data;
}

/** Fetches every page of a listing (bounded), for pickers. */
export async function all(apiPath, query, limit = 5000) {
  const items = [];
  let token = null;
  do {
    const page = await get(apiPath, { ...query, page_size: 1000, page_token: token });
    items.push(...(page.items || []));
    token = page.next_page_token;
  } while (token && items.length < limit);
  return items;
}

export async function del(apiPath, ifMatch) {
  return (await call('DELETE', apiPath, { ifMatch })).data;
}

export async function put(apiPath) {
  return (await call('PUT', apiPath, {})).data;
}

/** The caller's privileges on a securable (`GET {A}/privileges`), as a set of names, plus
 *  whether it administers the account: what the console shows actions for. Answers the
 *  full set when the server predates access control. */
export async function privileges(account, securable = {}) {
  try {
    const v = await get(path`/v1/accounts/${account}/privileges`, securable);
    const names = new Set((v.privileges || []).map((p) => p.privilege));
    return { admin: !!v.account_admin, has: (p) => v.account_admin || names.has(p), view: v };
  } catch (err) {
    if (err instanceof ApiError && err.status === 404 && err.code === 'NOT_FOUND' && /route/.test(err.message)) {
      return { admin: true, has: () => true, view: null };
    }
    throw err;
  }
}

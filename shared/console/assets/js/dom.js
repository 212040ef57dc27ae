// DOM construction for the console. Every string becomes a text node or an attribute value;
// nothing in the console parses markup, so text that came from an upstream catalog (or from
// anywhere else) can never become script or elements.

/** Creates an element. `attrs` keys: `class`, `on<event>` (a function), `href` (in-console
 *  links only: `#/...`), `value`/`checked`/`disabled` (properties), any other attribute. */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (key === 'class') {
      el.className = Array.isArray(v) ? v.filter(Boolean).join(' ') : v;
    } else if (key.startsWith('on')) {
      if (typeof v !== 'function') throw new TypeError(`${key} must be a function`);
      el.addEventListener(key.slice(2), v);
    } else if (key === 'href') {
      // Only links inside the console: never a URL that an upstream string could supply.
      if (typeof v !== 'string' || !v.startsWith('#/')) throw new TypeError('in-console links only');
      el.setAttribute('href', v);
    } else if (key === 'value' || key === 'checked' || key === 'disabled') {
      el[key] = v;
    } else {
      el.setAttribute(key, v === true ? '' : String(v));
    }
  }
  append(el, children);
  return el;
}

/** Appends children (nested arrays allowed): nodes as they are, strings and numbers as
 *  text, null/undefined/false skipped. */
export function append(el, ...children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/** Replaces all children of `el`. */
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

/** An in-console link built from path segments, each percent-encoded. */
export function href(...segments) {
  return '#/' + segments.map((s) => encodeURIComponent(String(s))).join('/');
}

export function link(text, ...segments) {
  return h('a', { href: href(...segments) }, text);
}

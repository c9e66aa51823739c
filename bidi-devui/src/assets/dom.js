// Building the page: elements made with `h` (never from HTML text, so whatever a server or a
// model sends is shown as text, not run), JSON shown as a tree of spans, times and durations.

/**
 * An element: `h('div', {class: 'x', onclick: f, dataset: {id: 1}}, 'text', child, [more])`.
 * Attributes named `on…` are listeners; `class`, `text`, `value`, `checked`, `disabled`,
 * `hidden` and `dataset` set those properties; others are attributes (skipped when null,
 * `false` or undefined).
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2), value);
    } else if (key === 'class') {
      el.className = value;
    } else if (key === 'text') {
      el.textContent = value;
    } else if (key === 'dataset') {
      Object.assign(el.dataset, value);
    } else if (['value', 'checked', 'disabled', 'hidden', 'open'].includes(key)) {
      el[key] = value;
    } else {
      el.setAttribute(key, value === true ? '' : String(value));
    }
  }
  append(el, children);
  return el;
}

/** Appends children: nodes, strings (as text), arrays of them; null and false are skipped. */
export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** Empties `el`, then appends `children`. */
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

/** JSON as an indented tree of spans: keys, strings, numbers, booleans and null coloured. */
export function jsonView(value, { compact = false } = {}) {
  const pre = h('pre', { class: compact ? 'json compact' : 'json' });
  writeJson(pre, value, 0, compact);
  return pre;
}

function writeJson(out, value, depth, compact) {
  const pad = (n) => (compact ? '' : '\n' + '  '.repeat(n));
  const sep = compact ? ',' : ',';
  if (value === null || value === undefined) {
    out.append(h('span', { class: 'j-null', text: 'null' }));
  } else if (typeof value === 'string') {
    out.append(h('span', { class: 'j-str', text: JSON.stringify(value) }));
  } else if (typeof value === 'number') {
    out.append(h('span', { class: 'j-num', text: String(value) }));
  } else if (typeof value === 'boolean') {
    out.append(h('span', { class: 'j-bool', text: String(value) }));
  } else if (Array.isArray(value)) {
    if (value.length === 0) return out.append('[]');
    out.append('[');
    value.forEach((item, i) => {
      out.append(pad(depth + 1));
      writeJson(out, item, depth + 1, compact);
      if (i < value.length - 1) out.append(sep);
    });
    out.append(pad(depth) + ']');
  } else {
    const entries = Object.entries(value);
    if (entries.length === 0) return out.append('{}');
    out.append('{');
    entries.forEach(([key, item], i) => {
      out.append(pad(depth + 1));
      out.append(h('span', { class: 'j-key', text: JSON.stringify(key) }), compact ? ':' : ': ');
      writeJson(out, item, depth + 1, compact);
      if (i < entries.length - 1) out.append(sep);
    });
    out.append(pad(depth) + '}');
  }
}

/** A wall-clock time of day from milliseconds since the epoch: `14:03:27.120`. */
export function clock(ms) {
  const d = new Date(ms);
  const two = (n) => String(n).padStart(2, '0');
  return `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}.${String(d.getMilliseconds()).padStart(3, '0')}`;
}

/** A duration in milliseconds, short: `850 ms`, `3.2 s`, `4 min 5 s`. */
export function duration(ms) {
  if (ms < 1000) return `${Math.max(0, Math.round(ms))} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const minutes = Math.floor(ms / 60_000);
  return `${minutes} min ${Math.round((ms % 60_000) / 1000)} s`;
}

/** The first `n` characters of an id, for display (the whole id in its title). */
export function shortId(id, n = 8) {
  const text = String(id ?? '');
  return h('code', { class: 'id', title: text, text: text.length > n ? text.slice(0, n) + '…' : text });
}

/** A small labelled badge: `badge('running', 'warn')`. */
export function badge(text, kind = '') {
  return h('span', { class: `badge ${kind}`.trim(), text });
}

/** An error box: the message, and the code and JSON Pointer when the server named them. */
export function errorBox(error) {
  const parts = [h('strong', { text: error.code ? `${error.code}: ` : 'error: ' }), error.message ?? String(error)];
  if (error.path) parts.push(h('span', { class: 'muted', text: ` (at ${error.path})` }));
  return h('div', { class: 'error-box', role: 'alert' }, parts);
}

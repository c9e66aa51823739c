// Forms made from JSON Schemas: a field per kind of value (objects, strings, numbers, integers,
// booleans, enums, arrays, maps, optional and nullable fields, choices of variants), and a
// raw-JSON toggle. A field is `{el, get(), set(value)}`; `get` throws a FormError naming the
// JSON Pointer of a value that is missing or wrong.

import { h } from './dom.js';
import { classify, initial, fits, resolve, prose } from './schema.js';

/** A value the form cannot make: where (a JSON Pointer) and why. */
export class FormError extends Error {
  constructor(path, message, el) {
    super(message);
    this.code = 'invalid_form';
    this.path = path || '/';
    this.el = el;
  }
}

const child = (path, key) => `${path}/${String(key).replace(/~/g, '~0').replace(/\//g, '~1')}`;

/** The field for `raw` (a schema within `root`) at `path`. */
export function field(raw, root, path = '') {
  const kind = classify(raw, root);
  const make = KINDS[kind.kind] ?? anyField;
  const built = make(kind, root, path);
  built.el.classList.add('field', `k-${kind.kind}`);
  built.el.dataset.path = path || '/';
  return built;
}

/** A schema's description, as a hint under its field, in prose. */
function hint(schema) {
  const text = prose(schema?.description);
  return text ? h('div', { class: 'hint', text }) : null;
}

function textField({ schema }, _root, path) {
  const multiline = (schema.maxLength ?? 0) > 200 || /\n/.test(schema.default ?? '');
  const input = h(multiline ? 'textarea' : 'input', {
    class: 'in',
    type: multiline ? undefined : 'text',
    rows: multiline ? 3 : undefined,
    placeholder: schema.format ?? schema.title ?? '',
    'aria-label': path || 'value',
  });
  return {
    el: h('div', {}, input),
    get: () => input.value,
    set: (value) => {
      input.value = typeof value === 'string' ? value : value == null ? '' : JSON.stringify(value);
    },
    focus: () => input.focus(),
  };
}

function numberField({ kind, schema }, _root, path) {
  const input = h('input', {
    class: 'in num',
    type: 'number',
    step: kind === 'integer' ? '1' : 'any',
    min: schema.minimum,
    max: schema.maximum,
    'aria-label': path || 'value',
  });
  return {
    el: h('div', {}, input),
    get: () => {
      if (input.value.trim() === '') throw new FormError(path, `a${kind === 'integer' ? 'n integer' : ' number'} is needed`, input);
      const value = Number(input.value);
      if (!Number.isFinite(value)) throw new FormError(path, 'not a number', input);
      if (kind === 'integer' && !Number.isInteger(value)) throw new FormError(path, 'not an integer', input);
      return value;
    },
    set: (value) => {
      input.value = typeof value === 'number' ? String(value) : '';
    },
  };
}

function booleanField(_kind, _root, path) {
  const input = h('input', { type: 'checkbox', 'aria-label': path || 'value' });
  return {
    el: h('label', { class: 'check' }, input, h('span', { text: 'true' })),
    get: () => input.checked,
    set: (value) => {
      input.checked = value === true;
    },
  };
}

function enumField({ values, labels }, _root, path) {
  const select = h(
    'select',
    { class: 'in', 'aria-label': path || 'value' },
    values.map((value, i) => h('option', {
      value: String(i),
      text: typeof value === 'string' ? value : JSON.stringify(value),
      title: labels?.[i] ?? undefined,
    })),
  );
  return {
    el: h('div', {}, select),
    get: () => values[Number(select.value)],
    set: (value) => {
      const at = values.findIndex((v) => JSON.stringify(v) === JSON.stringify(value));
      select.value = String(Math.max(0, at));
    },
  };
}

function constField({ value }) {
  return {
    el: h('div', {}, h('code', { class: 'const', text: JSON.stringify(value) })),
    get: () => value,
    set: () => {},
  };
}

function nullField() {
  return { el: h('div', {}, h('code', { class: 'const', text: 'null' })), get: () => null, set: () => {} };
}

/** Whether a field holds other fields: it folds away, instead of dimming, while not sent. */
const COMPOSITE = new Set(['object', 'array', 'union']);

/**
 * Ties a checkbox to a value's element: while the box says the value is not sent (`sent(box)`
 * false), a composite value is folded away and a plain one dimmed, and editing it, or pressing
 * one of its buttons, makes it sent. Returns the function that redraws it.
 */
function tie(box, el, sent, send) {
  const fold = [...el.classList].some((c) => COMPOSITE.has(c.replace(/^k-/, '')));
  const sync = () => el.classList.toggle(fold ? 'folded' : 'off', !sent(box));
  const wake = () => {
    if (!sent(box)) {
      send(box);
      sync();
    }
  };
  box.addEventListener('change', sync);
  el.addEventListener('input', wake);
  el.addEventListener('change', wake);
  el.addEventListener('click', (event) => { if (event.target.closest('button')) wake(); });
  return sync;
}

function nullableField({ inner }, root, path) {
  const toggle = h('input', { type: 'checkbox', 'aria-label': `${path || 'value'} is null` });
  const value = field(inner.schema, root, path);
  const sync = tie(toggle, value.el, (box) => !box.checked, (box) => { box.checked = false; });
  const el = h('div', { class: 'nullable' }, h('label', { class: 'check null-toggle' }, toggle, h('span', { text: 'null' })), value.el);
  return {
    el,
    get: () => (toggle.checked ? null : value.get()),
    set: (v) => {
      toggle.checked = v === null || v === undefined;
      if (!toggle.checked) value.set(v);
      sync();
    },
  };
}

function objectField(kind, root, path) {
  if (kind.additional !== null) return mapField(kind, root, path);
  const rows = [];
  const el = h('div', { class: 'obj' });
  for (const [key, raw] of Object.entries(kind.properties)) {
    let schema = resolve(raw, root);
    // An optional field that may also be null: left out is its null (as serde reads it).
    const inner = classify(schema, root);
    if (!kind.required.has(key) && inner.kind === 'nullable') schema = inner.inner.schema;
    // An optional boolean is always sent: its one checkbox says which.
    const required = kind.required.has(key);
    const optional = !required && inner.kind !== 'boolean';
    const value = field(schema, root, child(path, key));
    const include = !optional ? null : h('input', { type: 'checkbox', class: 'include', title: `send ${key}`, 'aria-label': `include ${key}` });
    const sync = include ? tie(include, value.el, (box) => box.checked, (box) => { box.checked = true; }) : () => {};
    const name = h('span', { class: 'key', text: key }, required ? h('span', { class: 'req', title: 'required', text: '*' }) : null);
    el.append(h('div', { class: 'prop', dataset: { key } }, h('div', { class: 'prop-head' }, include, name, hint(resolve(raw, root))), value.el));
    rows.push({ key, value, include, sync });
  }
  if (rows.length === 0) el.append(h('span', { class: 'muted', text: '{} (no fields)' }));
  return {
    el,
    get: () => {
      const out = {};
      for (const { key, value, include } of rows) {
        if (include && !include.checked) continue;
        out[key] = value.get();
      }
      return out;
    },
    set: (v) => {
      const obj = v && typeof v === 'object' && !Array.isArray(v) ? v : {};
      for (const { key, value, include, sync } of rows) {
        const present = key in obj && !(include && obj[key] === null);
        if (include) include.checked = present;
        const schema = resolve(kind.properties[key], root);
        value.set(present ? obj[key] : 'default' in schema && schema.default !== null ? schema.default : initial(schema, root));
        sync();
      }
    },
  };
}

function mapField({ additional }, root, path) {
  const list = h('div', { class: 'entries' });
  const entries = [];
  const add = (key = '', value = initial(additional, root)) => {
    const keyInput = h('input', { class: 'in key-in', type: 'text', placeholder: 'key', value: key, 'aria-label': 'key' });
    const item = field(additional, root, child(path, key || '…'));
    item.set(value);
    const entry = { keyInput, item };
    const row = h('div', { class: 'entry' }, keyInput, item.el, h('button', {
      type: 'button', class: 'icon', title: 'remove', text: '×',
      onclick: () => { entries.splice(entries.indexOf(entry), 1); row.remove(); },
    }));
    entries.push(entry);
    list.append(row);
  };
  const el = h('div', { class: 'map' }, list, h('button', { type: 'button', class: 'small', text: '+ entry', onclick: () => add() }));
  return {
    el,
    get: () => {
      const out = {};
      for (const { keyInput, item } of entries) {
        if (keyInput.value in out) throw new FormError(child(path, keyInput.value), 'this key is there twice', keyInput);
        out[keyInput.value] = item.get();
      }
      return out;
    },
    set: (v) => {
      entries.splice(0);
      list.replaceChildren();
      for (const [key, value] of Object.entries(v && typeof v === 'object' ? v : {})) add(key, value);
    },
  };
}

function arrayField({ items, prefix }, root, path) {
  if (prefix) return tupleField(prefix, root, path);
  const list = h('ol', { class: 'items', start: '0' });
  const fields = [];
  const renumber = () => fields.forEach((f, i) => { f.el.dataset.path = child(path, i); });
  const add = (value = initial(items, root)) => {
    const item = field(items, root, child(path, fields.length));
    item.set(value);
    const row = h('li', { class: 'item' }, item.el, h('button', {
      type: 'button', class: 'icon', title: 'remove', text: '×',
      onclick: () => { fields.splice(fields.indexOf(item), 1); row.remove(); renumber(); },
    }));
    fields.push(item);
    list.append(row);
  };
  const el = h('div', { class: 'arr' }, list, h('button', { type: 'button', class: 'small add-item', text: '+ item', onclick: () => add() }));
  return {
    el,
    get: () => fields.map((f) => f.get()),
    set: (v) => {
      fields.splice(0);
      list.replaceChildren();
      for (const value of Array.isArray(v) ? v : []) add(value);
    },
  };
}

function tupleField(prefix, root, path) {
  const fields = prefix.map((schema, i) => field(schema, root, child(path, i)));
  return {
    el: h('ol', { class: 'items tuple', start: '0' }, fields.map((f) => h('li', { class: 'item' }, f.el))),
    get: () => fields.map((f) => f.get()),
    set: (v) => fields.forEach((f, i) => f.set(Array.isArray(v) ? v[i] : undefined)),
  };
}

function unionField({ variants }, root, path) {
  const select = h('select', { class: 'in variant', 'aria-label': `${path || 'value'}: which kind` },
    variants.map((v, i) => h('option', { value: String(i), text: v.label })));
  const holder = h('div', { class: 'variant-body' });
  let current;
  const show = (i, value) => {
    current = field(variants[i].schema, root, path);
    current.set(value === undefined ? initial(variants[i].schema, root) : value);
    holder.replaceChildren(current.el);
  };
  select.addEventListener('change', () => show(Number(select.value)));
  show(0);
  return {
    el: h('div', { class: 'union' }, select, holder),
    get: () => current.get(),
    set: (value) => {
      const at = Math.max(0, variants.findIndex((v) => fits(value, v.schema, root)));
      select.value = String(at);
      show(at, value);
    },
  };
}

function anyField(_kind, _root, path) {
  const area = h('textarea', { class: 'in json-in', rows: 2, placeholder: 'any JSON', spellcheck: 'false', 'aria-label': path || 'value' });
  return {
    el: h('div', {}, area),
    get: () => {
      if (area.value.trim() === '') return null;
      try {
        return JSON.parse(area.value);
      } catch (error) {
        throw new FormError(path, `not JSON: ${error.message}`, area);
      }
    },
    set: (value) => {
      area.value = value === undefined || value === null ? '' : JSON.stringify(value);
    },
  };
}

const KINDS = {
  string: textField,
  number: numberField,
  integer: numberField,
  boolean: booleanField,
  enum: enumField,
  const: constField,
  null: nullField,
  nullable: nullableField,
  object: objectField,
  array: arrayField,
  union: unionField,
  any: anyField,
};

/**
 * A form for values of `schema` (none: the value is `null`, and the form says so), with a
 * Form / JSON toggle. `{el, value(), set(value)}`; `value` throws a FormError.
 */
export function schemaForm(schema, { name = 'value', value } = {}) {
  if (schema === undefined || schema === null) {
    return { el: h('p', { class: 'muted none', text: `takes no ${name} (null)` }), value: () => null, set: () => {}, empty: true };
  }
  let form;
  let problem = null;
  try {
    form = field(schema, schema);
    form.set(value === undefined ? initial(schema, schema) : value);
  } catch (error) {
    problem = error.message;
  }
  const raw = h('textarea', { class: 'in json-in raw', rows: 6, spellcheck: 'false', hidden: true, 'aria-label': `${name} as JSON` });
  const note = h('div', { class: 'form-note' });
  const formButton = h('button', { type: 'button', class: 'seg on', text: 'Form' });
  const jsonButton = h('button', { type: 'button', class: 'seg', text: 'JSON' });
  let mode = 'form';
  const setMode = (next) => {
    note.replaceChildren();
    if (next === mode) return;
    if (next === 'json') {
      let current;
      try {
        current = form.get();
      } catch {
        current = initial(schema, schema);
      }
      raw.value = JSON.stringify(current, null, 2);
    } else {
      let parsed;
      try {
        parsed = JSON.parse(raw.value);
      } catch (error) {
        note.append(h('span', { class: 'error-text', text: `not JSON: ${error.message}` }));
        return;
      }
      form.set(parsed);
    }
    mode = next;
    raw.hidden = mode !== 'json';
    form.el.hidden = mode === 'json';
    formButton.classList.toggle('on', mode === 'form');
    jsonButton.classList.toggle('on', mode === 'json');
  };
  formButton.addEventListener('click', () => setMode('form'));
  jsonButton.addEventListener('click', () => setMode('json'));
  if (problem) {
    raw.hidden = false;
    raw.value = 'null';
    mode = 'json';
    return {
      el: h('div', { class: 'schema-form' }, h('p', { class: 'muted', text: `no form for this schema (${problem}): JSON only` }), raw),
      value: () => parseRaw(raw),
      set: (v) => { raw.value = JSON.stringify(v, null, 2); },
    };
  }
  const el = h('div', { class: 'schema-form', dataset: { name } },
    h('div', { class: 'seg-group', role: 'group', 'aria-label': `${name}: form or JSON` }, formButton, jsonButton), form.el, raw, note);
  return {
    el,
    value: () => {
      el.querySelectorAll('.invalid').forEach((e) => e.classList.remove('invalid'));
      try {
        return mode === 'json' ? parseRaw(raw) : form.get();
      } catch (error) {
        error.el?.classList.add('invalid');
        throw error;
      }
    },
    set: (v) => (mode === 'json' ? (raw.value = JSON.stringify(v, null, 2)) : form.set(v)),
    mode: () => mode,
  };
}

function parseRaw(raw) {
  try {
    return JSON.parse(raw.value);
  } catch (error) {
    throw new FormError('', `not JSON: ${error.message}`, raw);
  }
}


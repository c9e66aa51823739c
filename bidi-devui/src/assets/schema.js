// Reading JSON Schemas (draft 2020-12, as schemars writes them): `$ref`s into `$defs` resolved,
// and each schema sorted into the one kind of field a form shows for it.

/** Follows `schema`'s `$ref` (within `root`), keeping the keywords beside it. */
export function resolve(schema, root, seen = new Set()) {
  if (schema === true || schema === undefined || schema === null) return {};
  if (schema === false) return { not: {} };
  if (typeof schema !== 'object' || typeof schema.$ref !== 'string') return schema;
  const ref = schema.$ref;
  if (seen.has(ref)) throw new Error(`the schema refers to itself through ${ref}`);
  seen.add(ref);
  const target = pointer(root, ref);
  if (target === undefined) throw new Error(`the schema's ${ref} names nothing`);
  const { $ref, ...beside } = schema;
  return resolve({ ...resolve(target, root, seen), ...beside }, root, seen);
}

/** The value a `#/…` JSON Pointer names in `root`. */
function pointer(root, ref) {
  if (ref === '#') return root;
  if (!ref.startsWith('#/')) return undefined;
  let value = root;
  for (const raw of ref.slice(2).split('/')) {
    const key = decodeURIComponent(raw).replace(/~1/g, '/').replace(/~0/g, '~');
    if (value === null || typeof value !== 'object' || !(key in value)) return undefined;
    value = value[key];
  }
  return value;
}

const isNull = (s) => s && (s.type === 'null' || (s.const === null && s.type === undefined));

/**
 * What kind of field `schema` is, with what that kind needs:
 * `{kind: 'object', properties, required, additional}`, `{kind: 'array', items, prefix}`,
 * `{kind: 'string' | 'number' | 'integer' | 'boolean' | 'null'}`, `{kind: 'enum', values}`,
 * `{kind: 'const', value}`, `{kind: 'nullable', inner}`, `{kind: 'union', variants}` or
 * `{kind: 'any'}`. Every kind carries `schema` (resolved) too.
 */
export function classify(raw, root) {
  const schema = resolve(raw, root);
  const of = (kind, more = {}) => ({ kind, schema, ...more });
  if ('const' in schema) return of('const', { value: schema.const });
  if (Array.isArray(schema.enum)) {
    const values = schema.enum.filter((v) => v !== null);
    const inner = of('enum', { values });
    return values.length < schema.enum.length ? of('nullable', { inner }) : inner;
  }
  const branches = schema.oneOf ?? schema.anyOf;
  if (Array.isArray(branches)) return union(schema, branches, root);
  if (Array.isArray(schema.allOf) && schema.allOf.length === 1) {
    const { allOf, ...beside } = schema;
    return classify({ ...resolve(allOf[0], root), ...beside }, root);
  }
  if (Array.isArray(schema.type)) {
    const types = schema.type.filter((t) => t !== 'null');
    const inner = types.length === 1 ? classify({ ...schema, type: types[0] }, root) : of('any');
    return types.length < schema.type.length ? of('nullable', { inner }) : inner;
  }
  const type = schema.type ?? (schema.properties ? 'object' : schema.items || schema.prefixItems ? 'array' : undefined);
  switch (type) {
    case 'object':
      return of('object', {
        properties: schema.properties ?? {},
        required: new Set(schema.required ?? []),
        additional: additional(schema),
      });
    case 'array':
      return of('array', { items: schema.items ?? {}, prefix: schema.prefixItems ?? null });
    case 'string':
    case 'number':
    case 'integer':
    case 'boolean':
    case 'null':
      return of(type);
    default:
      return of('any');
  }
}

/** The schema of a map's values: for an object without named properties, unless closed. */
function additional(schema) {
  const extra = schema.additionalProperties;
  if (schema.properties || extra === false) return null;
  return extra && typeof extra === 'object' ? extra : {};
}

/** `oneOf` / `anyOf`: a nullable field, an enum of constants, or a choice of variants. */
function union(schema, branches, root) {
  const { oneOf, anyOf, ...beside } = schema;
  const resolved = branches.map((b) => resolve(b, root));
  const others = resolved.filter((b) => !isNull(b));
  const nullable = others.length < resolved.length;
  let inner;
  if (others.length === 1) {
    inner = classify({ ...others[0], ...keep(beside) }, root);
  } else if (others.every((b) => 'const' in b || (Array.isArray(b.enum) && b.enum.length === 1))) {
    const values = others.map((b) => ('const' in b ? b.const : b.enum[0]));
    inner = { kind: 'enum', values, schema, labels: others.map((b) => (b.description ? prose(b.description) : b.title)) };
  } else {
    inner = { kind: 'union', schema, variants: others.map((b) => ({ schema: b, label: variantLabel(b, root) })) };
  }
  return nullable ? { kind: 'nullable', schema, inner } : inner;
}

/** The keywords a variant keeps from the union around it: its title and description. */
function keep(beside) {
  const out = {};
  if (beside.title) out.title = beside.title;
  if (beside.description) out.description = beside.description;
  if ('default' in beside) out.default = beside.default;
  return out;
}

/** How a variant is named in a choice: its title, its tag's constant, its only property. */
export function variantLabel(schema, root) {
  if (schema.title) return schema.title;
  const props = schema.properties ?? {};
  for (const [key, prop] of Object.entries(props)) {
    const p = resolve(prop, root);
    if ('const' in p && typeof p.const === 'string') return `${key}: ${p.const}`;
    if (Array.isArray(p.enum) && p.enum.length === 1) return `${key}: ${p.enum[0]}`;
  }
  const keys = Object.keys(props);
  if (keys.length === 1 && (schema.required ?? []).includes(keys[0])) return keys[0];
  if (schema.description) return prose(schema.description).split(/[.\n]/)[0].slice(0, 40);
  if (schema.type) return Array.isArray(schema.type) ? schema.type.join(' | ') : schema.type;
  if (keys.length) return `{${keys.slice(0, 3).join(', ')}${keys.length > 3 ? ', …' : ''}}`;
  return 'value';
}

/** A value that fits `schema`, to start a form with: its default, or the simplest one. */
export function initial(raw, root, depth = 0) {
  const field = classify(raw, root);
  const { schema } = field;
  if ('default' in schema) return structuredClone(schema.default);
  if (depth > 8) return null;
  switch (field.kind) {
    case 'const':
      return field.value;
    case 'enum':
      return field.values[0] ?? null;
    case 'nullable':
    case 'null':
    case 'any':
      return null;
    case 'union':
      return initial(field.variants[0].schema, root, depth + 1);
    case 'object': {
      // The required fields, and the optional ones whose default says something.
      const out = {};
      for (const [key, prop] of Object.entries(field.properties)) {
        const given = resolve(prop, root).default;
        if (field.required.has(key)) out[key] = initial(prop, root, depth + 1);
        else if (given !== undefined && given !== null) out[key] = structuredClone(given);
      }
      return out;
    }
    case 'array':
      return field.prefix ? field.prefix.map((item) => initial(item, root, depth + 1)) : [];
    case 'string':
      return '';
    case 'number':
    case 'integer':
      return typeof schema.minimum === 'number' ? schema.minimum : 0;
    case 'boolean':
      return false;
    default:
      return null;
  }
}

/** Whether `value` looks like an instance of `schema` (for picking a union's variant). */
export function fits(value, raw, root, depth = 0) {
  const field = classify(raw, root);
  if (depth > 8) return true;
  switch (field.kind) {
    case 'const':
      return JSON.stringify(value) === JSON.stringify(field.value);
    case 'enum':
      return field.values.some((v) => JSON.stringify(v) === JSON.stringify(value));
    case 'nullable':
      return value === null || fits(value, field.inner.schema, root, depth + 1);
    case 'union':
      return field.variants.some((v) => fits(value, v.schema, root, depth + 1));
    case 'object': {
      if (value === null || typeof value !== 'object' || Array.isArray(value)) return false;
      for (const key of field.required) if (!(key in value)) return false;
      return Object.entries(field.properties).every(
        ([key, prop]) => !(key in value) || fits(value[key], prop, root, depth + 1),
      );
    }
    case 'array':
      return Array.isArray(value);
    case 'string':
      return typeof value === 'string';
    case 'number':
      return typeof value === 'number';
    case 'integer':
      return Number.isInteger(value);
    case 'boolean':
      return typeof value === 'boolean';
    case 'null':
      return value === null;
    default:
      return true;
  }
}

/**
 * A description written for Rust readers, as prose for the people who fill a form: links
 * (`[X](path)`, `` [`X`] ``) as their text, code spans without their backticks, Rust paths
 * (`a::B`) as their last name, code blocks left out.
 */
export function prose(text) {
  return String(text ?? '')
    .replace(/```[\s\S]*?(?:```|$)/g, '')
    .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/\[`([^\]`]+)`\]/g, '$1')
    .replace(/`([^`]*)`/g, '$1')
    .replace(/\b(?:[A-Za-z_]\w*::)+(\w+)/g, '$1')
    .replace(/\n{3,}/g, '\n\n')
    .trim();
}

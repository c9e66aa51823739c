// A small Markdown renderer for answers: headings, paragraphs, lists, quotes, code blocks,
// tables, rules; code, bold, italics, strike-through and links inline. It builds elements and
// text nodes, never HTML text: markup in an answer shows as the characters it is, and a link
// is kept only if it goes to http(s), mailto or a relative address.

import { h } from './dom.js';

/** `text` as a fragment of elements. */
export function markdown(text) {
  const out = document.createDocumentFragment();
  blocks(String(text ?? '').replace(/\r\n?/g, '\n').split('\n'), out);
  return out;
}

const FENCE = /^\s{0,3}(`{3,}|~{3,})\s*([\w+-]*)/;
const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^\s{0,3}([-*_])(\s*\1){2,}\s*$/;
const QUOTE = /^\s{0,3}>\s?/;
const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
const TABLE_RULE = /^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$/;

function blocks(lines, out) {
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (line.trim() === '') {
      i += 1;
      continue;
    }
    const fence = line.match(FENCE);
    if (fence) {
      const body = [];
      i += 1;
      while (i < lines.length && !lines[i].trimStart().startsWith(fence[1])) body.push(lines[i++]);
      i += 1;
      out.append(h('pre', { class: 'code' }, h('code', { class: fence[2] ? `lang-${fence[2]}` : undefined, text: body.join('\n') })));
      continue;
    }
    const heading = line.match(HEADING);
    if (heading) {
      const level = Math.min(6, heading[1].length + 2);
      out.append(inline(heading[2], h(`h${level}`)));
      i += 1;
      continue;
    }
    if (RULE.test(line)) {
      out.append(h('hr'));
      i += 1;
      continue;
    }
    if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && QUOTE.test(lines[i])) body.push(lines[i++].replace(QUOTE, ''));
      const quote = h('blockquote');
      blocks(body, quote);
      out.append(quote);
      continue;
    }
    if (ITEM.test(line)) {
      i = list(lines, i, out);
      continue;
    }
    if (line.includes('|') && i + 1 < lines.length && TABLE_RULE.test(lines[i + 1])) {
      i = table(lines, i, out);
      continue;
    }
    const para = [];
    while (i < lines.length && lines[i].trim() !== '' && !startsBlock(lines[i])) para.push(lines[i++].trim());
    if (para.length === 0) para.push(lines[i++].trim());
    const p = h('p');
    para.forEach((piece, n) => {
      if (n > 0) p.append(h('br'));
      inline(piece, p);
    });
    out.append(p);
  }
}

function startsBlock(line) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || ITEM.test(line);
}

/** A list from line `i`: its items (with their indented continuation lines, nested lists among them). */
function list(lines, i, out) {
  const first = lines[i].match(ITEM);
  const indent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const el = h(ordered ? 'ol' : 'ul');
  if (ordered && parseInt(first[2], 10) !== 1) el.setAttribute('start', String(parseInt(first[2], 10)));
  while (i < lines.length) {
    const item = lines[i].match(ITEM);
    if (!item || item[1].length !== indent || /\d/.test(item[2]) !== ordered) break;
    const body = [item[3]];
    i += 1;
    while (i < lines.length) {
      const next = lines[i];
      const nested = next.match(ITEM);
      if (next.trim() === '') {
        if (i + 1 < lines.length && lines[i + 1].match(/^(\s*)/)[1].length > indent) {
          body.push('');
          i += 1;
          continue;
        }
        break;
      }
      if (nested && nested[1].length <= indent) break;
      if (!nested && next.match(/^(\s*)/)[1].length <= indent && startsBlock(next)) break;
      body.push(next.replace(new RegExp(`^\\s{0,${indent + 4}}`), ''));
      i += 1;
    }
    const li = h('li');
    if (body.length === 1) inline(body[0], li);
    else blocks(body, li);
    el.append(li);
  }
  out.append(el);
  return i;
}

function cells(line) {
  return line.trim().replace(/^\|/, '').replace(/\|$/, '').split('|').map((cell) => cell.trim());
}

function table(lines, i, out) {
  const head = cells(lines[i]);
  i += 2;
  const body = [];
  while (i < lines.length && lines[i].includes('|') && lines[i].trim() !== '') body.push(cells(lines[i++]));
  out.append(h('table', { class: 'md-table' },
    h('thead', {}, h('tr', {}, head.map((cell) => inline(cell, h('th'))))),
    h('tbody', {}, body.map((row) => h('tr', {}, head.map((_, n) => inline(row[n] ?? '', h('td'))))))));
  return i;
}

/** Inline spans: the earliest construct wins; what is between them is text. */
const INLINE = [
  ['code', /(`+)([\s\S]*?[^`])\1(?!`)/],
  ['escape', /\\([\\`*_{}[\]()#+\-.!~|>])/],
  ['link', /\[([^\]\n]+)\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/],
  ['auto', /<(https?:\/\/[^>\s]+)>|\bhttps?:\/\/[^\s<>()]+[^\s<>().,;:!?'"]/],
  ['strong', /\*\*(?=\S)([\s\S]*?\S)\*\*|\b__(?=\S)([\s\S]*?\S)__\b/],
  ['em', /\*(?=[^\s*])([\s\S]*?[^\s*])\*|\b_(?=[^\s_])([\s\S]*?[^\s_])_\b/],
  ['del', /~~(?=\S)([\s\S]*?\S)~~/],
];

/** Renders `text`'s inline spans into `into`, and returns it. */
export function inline(text, into) {
  let rest = text;
  while (rest) {
    let best = null;
    for (const [kind, re] of INLINE) {
      const m = re.exec(rest);
      if (m && (best === null || m.index < best.m.index)) best = { kind, m };
    }
    if (!best) {
      into.append(rest);
      break;
    }
    const { kind, m } = best;
    if (m.index > 0) into.append(rest.slice(0, m.index));
    into.append(span(kind, m));
    rest = rest.slice(m.index + m[0].length);
  }
  return into;
}

function span(kind, m) {
  switch (kind) {
    case 'code':
      return h('code', { text: m[2].replace(/^ (.*) $/, '$1') });
    case 'escape':
      return m[1];
    case 'link':
      return link(m[2], (a) => inline(m[1], a));
    case 'auto': {
      const target = m[1] ?? m[0];
      return link(target, (a) => a.append(target));
    }
    case 'strong':
      return inline(m[1] ?? m[2], h('strong'));
    case 'em':
      return inline(m[1] ?? m[2], h('em'));
    case 'del':
      return inline(m[1], h('del'));
    default:
      return m[0];
  }
}

/** A link to `target` if it is safe to follow, else its text only. */
function link(target, fill) {
  if (!safe(target)) return fill(h('span', { class: 'unsafe-link', title: `not a link: ${target}` }));
  return fill(h('a', { href: target, target: '_blank', rel: 'noopener noreferrer' }));
}

/** http(s), mailto, or a relative address (no scheme): never `javascript:` and the like. */
export function safe(target) {
  const scheme = /^([a-zA-Z][a-zA-Z0-9+.-]*):/.exec(target.trim());
  if (!scheme) return true;
  return ['http', 'https', 'mailto'].includes(scheme[1].toLowerCase());
}

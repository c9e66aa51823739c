// Live traces: the list of traces the server keeps, kept current from `api/traces/live` (SSE of
// span starts and ends), and one trace as a waterfall of its spans (a connection's span, its
// turns' spans, their steps: an agent's `invoke_agent`, its `chat` and `execute_tool` spans),
// running ones growing as they run, with each span's attributes, status and events, and the
// tokens of the model calls each span holds.

import { h, replace, jsonView, badge, clock, duration, shortId, errorBox } from './dom.js';
import { getJson, url, seg } from './api.js';

/** The traces view: `{nav, main, show(traceId)}`. */
export function tracesView() {
  const list = h('div', { class: 'trace-list', role: 'list' });
  const status = badge('connecting', 'warn');
  const nav = h('div', { class: 'nav-traces' }, h('div', { class: 'nav-head' }, h('span', { text: 'Traces' }), status), list);
  const main = h('section', { class: 'view traces' }, h('p', { class: 'muted', text: 'Pick a trace: each connection is one, its turns are its spans.' }));

  /** traceId → {summary, spans: Map spanId → span, row}. */
  const traces = new Map();
  let selected = null;
  let source = null;
  let ticking = null;

  const entry = (traceId) => {
    let trace = traces.get(traceId);
    if (!trace) {
      trace = { summary: { traceId, name: '…', startTime: Date.now(), spans: 0, failed: false }, spans: new Map(), row: null };
      traces.set(traceId, trace);
    }
    return trace;
  };
  const drawRow = (trace) => {
    const { summary } = trace;
    const running = summary.endTime === undefined;
    const row = h('a', {
      class: `trace-row${running ? ' running' : ''}${summary.failed ? ' failed' : ''}${selected === summary.traceId ? ' on' : ''}`,
      href: `#/traces/${seg(summary.traceId)}`,
      role: 'listitem',
      dataset: { traceId: summary.traceId, name: summary.name, running: String(running) },
    },
    h('span', { class: 'name', text: summary.name }),
    h('span', { class: 'meta' }, clock(summary.startTime), ' · ',
      running ? h('span', { class: 'live-text', text: 'running' }) : duration(summary.endTime - summary.startTime),
      ' · ', `${summary.spans} span${summary.spans === 1 ? '' : 's'}`),
    summary.failed ? badge('error', 'bad') : null);
    if (trace.row) trace.row.replaceWith(row);
    trace.row = row;
    return row;
  };
  const redrawList = () => {
    const sorted = [...traces.values()].sort((a, b) => b.summary.startTime - a.summary.startTime);
    replace(list, sorted.length ? sorted.map(drawRow) : h('p', { class: 'muted', text: 'No traces yet: run something.' }));
  };

  /** A span started or ended: its trace's summary, and the waterfall if it is shown. */
  const onSpan = (span) => {
    const trace = entry(span.traceId);
    const known = trace.spans.get(span.spanId);
    if (known?.endTime !== undefined && span.endTime === undefined) return;
    trace.spans.set(span.spanId, span);
    const { summary } = trace;
    summary.spans = Math.max(summary.spans, trace.spans.size);
    // The trace's root: a span without a parent, else the first seen (a connection continuing
    // a caller's trace has the caller's span, kept elsewhere, as its parent).
    if (!span.parentSpanId || (trace.rootId === undefined && trace.spans.size === 1)) trace.rootId = span.spanId;
    if (span.spanId === trace.rootId) {
      summary.name = span.name;
      summary.startTime = span.startTime;
      summary.endTime = span.endTime;
    }
    if (span.status?.code === 'error') summary.failed = true;
    if (trace.row && list.contains(trace.row)) {
      drawRow(trace);
      if (span.spanId === trace.rootId && !known) redrawList();
    } else {
      redrawList();
    }
    if (selected === span.traceId) drawTrace();
  };

  const connect = () => {
    source = new EventSource(url('api/traces/live'));
    source.addEventListener('open', () => { status.textContent = 'live'; status.className = 'badge live'; });
    source.addEventListener('error', () => { status.textContent = 'reconnecting'; status.className = 'badge warn'; });
    source.addEventListener('traces', (event) => {
      for (const summary of JSON.parse(event.data).traces) {
        const trace = entry(summary.traceId);
        trace.summary = { ...summary, spans: Math.max(summary.spans, trace.spans.size) };
      }
      redrawList();
    });
    for (const kind of ['span_start', 'span_end']) {
      source.addEventListener(kind, (event) => onSpan(JSON.parse(event.data)));
    }
    // Updates were missed: the list and the trace shown are read again whole.
    source.addEventListener('lagged', async () => {
      try {
        const { traces: kept } = await getJson('api/traces');
        for (const summary of kept) {
          const trace = entry(summary.traceId);
          trace.summary = { ...summary, spans: Math.max(summary.spans, trace.spans.size) };
        }
        redrawList();
      } catch {
        // The stream's own errors say it: it reconnects.
      }
      if (selected) load(selected);
    });
  };

  /** The trace's spans from the server, merged with what came live. */
  const load = async (traceId) => {
    try {
      const { spans } = await getJson(`api/traces/${seg(traceId)}`);
      const trace = entry(traceId);
      for (const span of spans) {
        const known = trace.spans.get(span.spanId);
        if (!(known?.endTime !== undefined && span.endTime === undefined)) trace.spans.set(span.spanId, span);
      }
      const ids = new Set(spans.map((s) => s.spanId));
      const root = spans.find((s) => !s.parentSpanId || !ids.has(s.parentSpanId));
      if (root) Object.assign(trace.summary, { name: root.name, startTime: root.startTime, endTime: root.endTime });
      trace.summary.spans = Math.max(trace.summary.spans, trace.spans.size);
      if (selected === traceId) drawTrace();
    } catch (error) {
      if (selected === traceId) replace(main, errorBox(error));
    }
  };

  let detail = null;
  let bars = [];
  /** Where each bar sits: the trace runs from its first start to its last end (or now). */
  const place = () => {
    const spans = bars.map((b) => b.span);
    const now = Date.now();
    const start = Math.min(...spans.map((s) => s.startTime));
    const end = Math.max(...spans.map((s) => s.endTime ?? now), start + 1);
    for (const { span, bar, time } of bars) {
      const stop = span.endTime ?? now;
      bar.style.left = `${((span.startTime - start) / (end - start)) * 100}%`;
      bar.style.width = `${Math.max(0.5, ((stop - span.startTime) / (end - start)) * 100)}%`;
      time.textContent = span.endTime === undefined ? `${duration(stop - span.startTime)}…` : duration(stop - span.startTime);
    }
    return end - start;
  };
  const drawTrace = () => {
    const trace = traces.get(selected);
    if (!trace || trace.spans.size === 0) return;
    const spans = [...trace.spans.values()];
    const running = spans.some((s) => s.endTime === undefined);
    const counted = tokens(spans);
    bars = ordered(spans).map(({ span, depth }) => spanRow(span, depth, counted.get(span.spanId), () => {
      detail = span.spanId;
      drawTrace();
    }));
    const took = place();
    const roots = spans.filter((s) => !s.parentSpanId || !trace.spans.has(s.parentSpanId));
    const shown = spans.find((s) => s.spanId === detail) ?? roots[0] ?? spans[0];
    const total = sum(roots.map((s) => counted.get(s.spanId)));
    replace(main,
      h('header', { class: 'view-head' },
        h('h2', {}, trace.summary.name, ' ', running ? badge('running', 'live') : badge(duration(took), 'ok'),
          total ? h('span', { class: 'badge kind trace-tokens', text: tokenText(total) }) : null),
        h('div', { class: 'muted' }, 'trace ', shortId(selected, 32))),
      h('div', { class: 'waterfall', role: 'table', dataset: { traceId: selected } }, bars.map((b) => b.row)),
      shown ? spanDetail(shown) : null);
    clearInterval(ticking);
    // Running bars grow in place: the rows stay the same elements.
    ticking = running ? setInterval(() => { if (main.isConnected) place(); }, 250) : null;
  };

  const show = (traceId) => {
    if (!traceId) {
      selected = null;
      return;
    }
    if (selected !== traceId) detail = null;
    selected = traceId;
    traces.forEach((trace) => trace.row?.classList.toggle('on', trace.summary.traceId === traceId));
    replace(main, h('p', { class: 'muted', text: 'loading…' }));
    load(traceId);
  };

  /** Opens the live stream once the server lets this caller read traces. */
  const start = async () => {
    try {
      await getJson('api/traces');
    } catch (error) {
      status.textContent = 'unavailable';
      status.className = 'badge bad';
      replace(list, errorBox(error));
      return false;
    }
    if (!source) connect();
    return true;
  };
  return { nav, main, show, start };
}

/** Spans as a tree, depth first, children in start order. */
function ordered(spans) {
  const ids = new Set(spans.map((s) => s.spanId));
  const children = new Map();
  for (const span of spans) {
    const parent = span.parentSpanId && ids.has(span.parentSpanId) ? span.parentSpanId : null;
    if (!children.has(parent)) children.set(parent, []);
    children.get(parent).push(span);
  }
  const out = [];
  const walk = (parent, depth) => {
    for (const span of (children.get(parent) ?? []).sort((a, b) => a.startTime - b.startTime)) {
      out.push({ span, depth });
      walk(span.spanId, depth + 1);
    }
  };
  walk(null, 0);
  return out;
}

/** `{input, output}` added up over `counts` (nulls skipped); null when all are. */
function sum(counts) {
  return counts.reduce((total, count) => (count ? {
    input: (total?.input ?? 0) + count.input,
    output: (total?.output ?? 0) + count.output,
  } : total), null);
}

/**
 * The tokens of each span, by id: a model call's own (`gen_ai.usage.*` of a `chat` span), any
 * other span's the model calls below it (an agent's turn); null for a span with none below.
 */
function tokens(spans) {
  const children = new Map();
  for (const span of spans) {
    if (!children.has(span.parentSpanId)) children.set(span.parentSpanId, []);
    children.get(span.parentSpanId).push(span);
  }
  const counted = new Map();
  const count = (span) => {
    const attributes = span.attributes ?? {};
    const own = attributes['gen_ai.operation.name'] === 'chat'
      ? { input: Number(attributes['gen_ai.usage.input_tokens'] ?? 0), output: Number(attributes['gen_ai.usage.output_tokens'] ?? 0) }
      : sum((children.get(span.spanId) ?? []).map(count));
    counted.set(span.spanId, own);
    return own;
  };
  for (const span of spans) if (!counted.has(span.spanId)) count(span);
  return counted;
}

/** How a span's tokens read: `12 in · 30 out`. */
function tokenText({ input, output }) {
  return `${input} in · ${output} out`;
}

/** A row of the waterfall: `{span, row, bar, time}` (the bar placed by `place`). */
function spanRow(span, depth, counted, onclick) {
  const running = span.endTime === undefined;
  const bar = h('span', { class: 'bar' });
  const time = h('span', { class: 'span-time' });
  const failed = span.status?.code === 'error';
  const name = h('span', { class: 'span-name', text: span.name });
  name.style.paddingLeft = `${depth * 1.1}em`;
  const row = h('div', {
    class: `span-row${running ? ' running' : ''}${failed ? ' failed' : ''}`,
    role: 'row',
    tabindex: '0',
    dataset: { spanName: span.name, spanId: span.spanId, running: String(running) },
    onclick,
    onkeydown: (event) => { if (event.key === 'Enter') onclick(); },
  }, name, h('span', { class: 'track' }, bar),
  h('span', { class: 'span-tokens', text: counted ? tokenText(counted) : '' }), time);
  return { span, row, bar, time };
}

/** A JSON attribute (`bidi.init`, `bidi.output`) shown as JSON when it is. */
function attribute(value) {
  if (typeof value === 'string' && /^[[{"]/.test(value)) {
    try {
      return jsonView(JSON.parse(value), { compact: true });
    } catch {
      // Not JSON (a truncated value, say): its text.
    }
  }
  return typeof value === 'string' ? h('span', { text: value }) : jsonView(value, { compact: true });
}

function spanDetail(span) {
  const rows = Object.entries(span.attributes ?? {}).map(([key, value]) => h('tr', {}, h('th', { text: key }), h('td', {}, attribute(value))));
  return h('div', { class: 'span-detail', dataset: { spanId: span.spanId } },
    h('h3', {}, span.name, ' ', span.endTime === undefined ? badge('running', 'live') : null),
    span.status?.code === 'error' ? errorBox({ code: 'error', message: span.status.message }) : null,
    h('dl', { class: 'facts' },
      h('dt', { text: 'span' }), h('dd', {}, shortId(span.spanId, 16)),
      h('dt', { text: 'started' }), h('dd', { text: clock(span.startTime) }),
      h('dt', { text: 'ended' }), h('dd', { text: span.endTime === undefined ? 'running' : `${clock(span.endTime)} (${duration(span.endTime - span.startTime)})` }),
      h('dt', { text: 'status' }), h('dd', { text: span.status?.code ?? 'unset' }),
      h('dt', { text: 'scope' }), h('dd', { text: `${span.scope} (${span.kind})` })),
    rows.length ? h('table', { class: 'attrs' }, h('tbody', {}, rows)) : h('p', { class: 'muted', text: span.endTime === undefined ? 'attributes come when it ends' : 'no attributes' }),
    span.events?.length ? h('div', { class: 'events' }, h('h4', { text: 'events' }), span.events.map((event) =>
      h('div', { class: 'event' }, h('code', { text: clock(event.time) }), ' ', h('strong', { text: event.name }), ' ', jsonView(event.attributes, { compact: true })))) : null);
}

// The run view of one action: its four schemas, forms for its init and inputs, and one
// connection at a time over the WebSocket wire (`init`, `send`, `close`, `cancel` frames out;
// `chunk`, `turn_end`, `output`, `error` frames in), shown as a transcript of turns.

import { h, replace, jsonView, errorBox, badge } from './dom.js';
import { wsUrl } from './api.js';
import { schemaForm } from './form.js';

const SCHEMAS = [
  ['init', 'initSchema', 'what a connection opens with'],
  ['input', 'inputSchema', 'one input, sent per turn'],
  ['stream', 'streamSchema', 'one chunk the action streams'],
  ['output', 'outputSchema', 'the final output'],
];

/** The four schemas, one tab each. */
function schemaTabs(action) {
  const body = h('div', { class: 'schema-body' });
  const tabs = h('div', { class: 'seg-group' });
  const show = (field, button) => {
    tabs.querySelectorAll('button').forEach((b) => b.classList.toggle('on', b === button));
    const schema = action[field];
    replace(body, schema === undefined ? h('p', { class: 'muted', text: 'none: the type is (), the value null' }) : jsonView(schema));
  };
  for (const [name, field, what] of SCHEMAS) {
    const button = h('button', { type: 'button', class: 'seg', text: name, title: what, dataset: { schema: name } });
    button.addEventListener('click', () => show(field, button));
    tabs.append(button);
  }
  show('initSchema', tabs.firstChild);
  return h('details', { class: 'schemas' }, h('summary', { text: 'Schemas' }), tabs, body);
}

/** A view of `action` (an entry of `GET /actions`) that runs it. */
export function runView(action) {
  const init = schemaForm(action.initSchema, { name: 'init' });
  const input = schemaForm(action.inputSchema, { name: 'input' });
  const transcript = h('div', { class: 'transcript', 'aria-live': 'polite' });
  const state = badge('not connected', 'idle');
  const problem = h('div', { class: 'problem' });
  const connect = h('button', { type: 'button', class: 'primary connect', text: 'Connect' });
  const send = h('button', { type: 'button', class: 'primary send', text: 'Send', disabled: true });
  const close = h('button', { type: 'button', class: 'close-input', text: 'Close input', title: 'no more input: the action finishes and answers its output', disabled: true });
  const cancel = h('button', { type: 'button', class: 'danger cancel', text: 'Cancel', disabled: true });

  let socket = null;
  let turn = null;
  let turns = 0;
  let over = false;

  const setState = (name, kind) => {
    state.textContent = name;
    state.className = `badge ${kind}`;
    state.dataset.state = name;
    const open = name === 'open';
    connect.disabled = name === 'connecting' || open;
    connect.textContent = over ? 'Connect again' : 'Connect';
    send.disabled = close.disabled = cancel.disabled = !open;
  };
  const log = (...children) => {
    const entry = h('div', { class: 'entry' }, children);
    transcript.append(entry);
    entry.scrollIntoView({ block: 'nearest' });
    return entry;
  };
  const currentTurn = () => {
    if (turn) return turn;
    turns += 1;
    const chunks = h('div', { class: 'chunks' });
    const el = h('div', { class: 'entry turn', dataset: { turn: turns } }, h('div', { class: 'turn-head' }, `turn ${turns}`, h('span', { class: 'spinner', title: 'streaming' })), chunks);
    transcript.append(el);
    turn = { el, chunks };
    return turn;
  };
  const fail = (error) => replace(problem, errorBox(error));

  const onFrame = (frame) => {
    switch (frame.type) {
      case 'chunk': {
        const chunk = frame.chunk;
        const { chunks } = currentTurn();
        chunks.append(h('div', { class: 'chunk' }, typeof chunk === 'string' ? h('span', { class: 'text', text: chunk }) : jsonView(chunk, { compact: true })));
        turn.el.scrollIntoView({ block: 'nearest' });
        break;
      }
      case 'turn_end': {
        const { el, chunks } = currentTurn();
        if (!chunks.firstChild) chunks.append(h('div', { class: 'muted', text: '(no chunks)' }));
        el.classList.add('ended');
        el.querySelector('.spinner')?.replaceWith(badge('turn end', 'ok'));
        turn = null;
        break;
      }
      case 'output':
        over = true;
        log(h('span', { class: 'dir dir-in', text: '← output' }), jsonView(frame.output)).classList.add('output');
        setState('finished', 'ok');
        break;
      case 'error': {
        const entry = log(errorBox(frame));
        entry.classList.add('refused');
        if (frame.code === 'cancelled') {
          over = true;
          setState('cancelled', 'bad');
        } else if (frame.code === 'connection_failed' || frame.code === 'idle_timeout') {
          over = true;
          setState('failed', 'bad');
        }
        break;
      }
      default:
        log(h('span', { class: 'muted', text: `an unknown frame: ${JSON.stringify(frame)}` }));
    }
  };

  connect.addEventListener('click', () => {
    problem.replaceChildren();
    let initValue;
    try {
      initValue = init.value();
    } catch (error) {
      return fail(error);
    }
    if (socket || over) transcript.append(h('hr', { class: 'new-connection' }));
    over = false;
    turn = null;
    turns = 0;
    const ws = new WebSocket(wsUrl('..' + action.key));
    socket = ws;
    setState('connecting', 'warn');
    ws.addEventListener('open', () => {
      ws.send(JSON.stringify({ type: 'init', init: initValue }));
      log(h('span', { class: 'dir dir-out', text: '→ init' }), jsonView(initValue, { compact: true })).classList.add('sent');
      setState('open', 'live');
    });
    ws.addEventListener('message', (event) => {
      if (ws !== socket) return;
      let frame;
      try {
        frame = JSON.parse(event.data);
      } catch {
        return log(h('span', { class: 'muted', text: `a frame that is not JSON: ${event.data}` }));
      }
      onFrame(frame);
    });
    ws.addEventListener('close', (event) => {
      if (ws !== socket) return;
      if (!over) {
        log(h('span', { class: 'muted', text: `the socket closed (${event.code}${event.reason ? `: ${event.reason}` : ''}) before an output` }));
        setState('closed', 'bad');
      } else if (state.dataset.state === 'open') {
        setState('closed', 'idle');
      }
      over = true;
      connect.disabled = false;
      connect.textContent = 'Connect again';
    });
  });

  send.addEventListener('click', () => {
    problem.replaceChildren();
    let value;
    try {
      value = input.value();
    } catch (error) {
      return fail(error);
    }
    socket.send(JSON.stringify({ type: 'send', input: value }));
    log(h('span', { class: 'dir dir-out', text: '→ input' }), jsonView(value, { compact: true })).classList.add('sent');
  });
  close.addEventListener('click', () => {
    socket.send(JSON.stringify({ type: 'close' }));
    log(h('span', { class: 'dir dir-out', text: '→ close' }), h('span', { class: 'muted', text: ' no more input' })).classList.add('sent');
    send.disabled = close.disabled = true;
  });
  cancel.addEventListener('click', () => {
    socket.send(JSON.stringify({ type: 'cancel', reason: 'cancelled from the Dev UI' }));
    log(h('span', { class: 'dir dir-out', text: '→ cancel' })).classList.add('sent');
    send.disabled = close.disabled = cancel.disabled = true;
  });

  const el = h('section', { class: 'view run', dataset: { key: action.key } },
    h('header', { class: 'view-head' },
      h('h2', {}, action.name, ' ', badge(action.type, 'kind')),
      h('code', { class: 'muted', text: action.key }),
      action.description ? h('p', { text: action.description }) : null),
    schemaTabs(action),
    h('div', { class: 'run-grid' },
      h('div', { class: 'forms' },
        h('div', { class: 'panel init-panel' }, h('h3', { text: 'Init' }), init.el, h('div', { class: 'actions' }, connect, state)),
        h('div', { class: 'panel input-panel' }, h('h3', { text: 'Input' }), input.el, h('div', { class: 'actions' }, send, close, cancel))),
      h('div', { class: 'panel connection' }, h('h3', { text: 'Connection' }), problem, transcript)));
  return { el };
}

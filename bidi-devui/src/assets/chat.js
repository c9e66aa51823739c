// A chat with an agent over its UI message stream (`POST /dev/api/agent/{name}/chat`, the
// Vercel AI SDK's wire): an answer there runs to its end whoever reads it, so a reload
// mid-answer does not stop it, and `GET .../chat/{id}/stream` gives a running answer again,
// from its start, to the reloaded page. Answers stream in as markdown; tool calls show as cards; calls
// waiting for the user (approvals, client tools) are answered with buttons, all at once in one
// request that carries the answered tool parts. Once an answer ends, the conversation is read
// back from the session (`GET /agent/{name}/session/{id}`), as after a reload. Stop aborts the
// session's running turn (`POST /dev/api/agents/{name}/sessions/{id}/abort`). The chat's id
// is the session's, kept in localStorage; while an answer runs, the session shows its
// question.

import { h, replace, errorBox, badge, shortId } from './dom.js';
import { getJson, postJson, readEvents, seg, ApiError } from './api.js';
import { markdown } from './markdown.js';
import { callCard, PAGE_TOOLS } from './calls.js';

const sessionKey = (agent) => `bidi-dev/chat/${agent}`;
const TOOLS_KEY = 'bidi-dev/page-tools';

function storedTools() {
  try {
    const names = JSON.parse(localStorage.getItem(TOOLS_KEY) ?? '[]');
    return new Set(Array.isArray(names) ? names : []);
  } catch {
    return new Set();
  }
}

/** A fresh chat id (crypto.randomUUID needs a secure context; this does not). */
function newChatId() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return `chat-${[...bytes].map((b) => b.toString(16).padStart(2, '0')).join('')}`;
}

/** A chat with `agent` (an entry of `GET /dev/api/agents`). */
export function chatView(agent) {
  const base = `../agent/${seg(agent.name)}`;
  const chat = `api/agent/${seg(agent.name)}`;
  const messages = h('div', { class: 'messages', 'aria-live': 'polite' });
  const composer = h('textarea', { class: 'in composer', rows: 2, placeholder: `Message ${agent.name}…`, 'aria-label': 'message' });
  const sendButton = h('button', { type: 'button', class: 'primary send', text: 'Send' });
  const stopButton = h('button', { type: 'button', class: 'danger stop', text: 'Stop', hidden: true });
  const busy = h('div', { class: 'busy', hidden: true, role: 'status' }, h('span', { class: 'spinner' }), ' working…');
  const sessionLabel = h('span', { class: 'session-id' });
  const hint = h('div', { class: 'hint composer-hint' });
  const chosen = storedTools();
  const toolBoxes = PAGE_TOOLS.map((tool) => {
    const box = h('input', { type: 'checkbox', checked: chosen.has(tool.name), dataset: { tool: tool.name } });
    box.addEventListener('change', () => {
      const names = PAGE_TOOLS.filter((_, i) => toolBoxes[i].checked).map((t) => t.name);
      localStorage.setItem(TOOLS_KEY, JSON.stringify(names));
    });
    return box;
  });

  let sessionId = localStorage.getItem(sessionKey(agent.name));
  // The answer being read (its reader, not the turn: the turn runs on without it).
  let reading = null;
  let stopping = false;
  // Bumped by "New chat": an answer of the chat before it no longer touches the page.
  let generation = 0;
  let sent = 0;
  const cards = new Map();
  const pending = new Map();
  let live = null;
  // The errors the answer being read reported.
  let notices = [];

  const showSession = () => {
    replace(sessionLabel, sessionId ? ['session ', shortId(sessionId, 12)] : h('span', { class: 'muted', text: 'new chat' }));
    sessionLabel.dataset.session = sessionId ?? '';
    toolBoxes.forEach((box) => { box.disabled = Boolean(sessionId); });
  };
  const setBusy = (on) => {
    busy.hidden = !on;
    busy.lastChild.textContent = stopping ? ' stopping…' : ' working…';
    stopButton.hidden = !on;
    stopButton.disabled = stopping;
    sendButton.disabled = on || pending.size > 0;
    composer.disabled = on;
    messages.parentElement?.classList.toggle('is-busy', on);
  };
  const scroll = () => { messages.scrollTop = messages.scrollHeight; };
  const bubble = (role, ...children) => {
    const el = h('div', { class: `bubble ${role}` }, children);
    messages.append(el);
    scroll();
    return el;
  };

  /** A message of the conversation, as the session keeps it. */
  const render = (message, into = null) => {
    switch (message.role) {
      case 'user':
        return bubble('user', h('div', { class: 'plain', text: message.content }));
      case 'assistant':
        return assistant(message, into ?? bubble('assistant'));
      case 'toolResult': {
        const card = cards.get(message.toolCallId);
        if (card) return card.result(message);
        return bubble('tool', h('code', { text: message.toolName }), ' → ', message.content);
      }
      case 'error': {
        const el = into ?? bubble('assistant');
        el.classList.add('failed');
        if (message.partial) assistant(message.partial, el);
        el.append(errorBox({ code: 'model', message: message.error }));
        return el;
      }
      case 'aborted': {
        const el = assistant(message.partial ?? { content: [] }, into ?? bubble('assistant'));
        el.append(badge('stopped', 'idle'));
        return el;
      }
      default:
        return bubble('tool', h('span', { class: 'muted', text: JSON.stringify(message) }));
    }
  };
  const assistant = (message, el) => {
    el.replaceChildren();
    for (const block of message.content ?? []) {
      if (block.type === 'text') el.append(h('div', { class: 'md' }, markdown(block.text)));
      else if (block.type === 'thinking') el.append(h('details', { class: 'thinking' }, h('summary', { text: 'thinking' }), h('div', { class: 'plain', text: block.thinking })));
      else if (block.type === 'toolCall') {
        const card = callCard({ ...block });
        cards.set(block.id, card);
        el.append(card.el);
      }
    }
    return el;
  };

  /** Calls waiting for the user: approvals of the agent's tools, results of client tools. */
  const waitFor = (calls, kind) => {
    for (const call of calls) {
      let card = cards.get(call.id);
      if (!card) {
        card = callCard({ ...call });
        cards.set(call.id, card);
        bubble('assistant', card.el);
      }
      const entry = { call, kind, answer: null };
      pending.set(call.id, entry);
      card.ask(kind, (answer) => {
        entry.answer = answer;
        if ([...pending.values()].every((p) => p.answer)) resume();
      });
    }
    sendButton.disabled = true;
    hint.textContent = 'Answer the calls above to go on.';
  };

  const dropSpinner = () => live?.el.querySelector(':scope > .spinner')?.remove();

  /** One chunk of the UI message stream, rendered as it comes. */
  const onChunk = (_name, chunk) => {
    if (!chunk || typeof chunk !== 'object') return; // `[DONE]`
    const card = cards.get(chunk.toolCallId);
    switch (chunk.type) {
      case 'start':
        live = { el: bubble('assistant live', h('span', { class: 'spinner' })), blocks: new Map(), args: new Map() };
        break;
      case 'text-start':
      case 'reasoning-start': {
        if (!live) break;
        dropSpinner();
        const md = chunk.type === 'text-start';
        const el = h('div', { class: md ? 'md' : 'plain' });
        live.blocks.set(chunk.id, { text: '', el, md });
        live.el.append(md ? el : h('details', { class: 'thinking', open: true }, h('summary', { text: 'thinking' }), el));
        break;
      }
      case 'text-delta':
      case 'reasoning-delta': {
        const block = live?.blocks.get(chunk.id);
        if (!block) break;
        block.text += chunk.delta;
        if (block.md) replace(block.el, markdown(block.text));
        else block.el.textContent = block.text;
        scroll();
        break;
      }
      case 'tool-input-start':
      case 'tool-input-available': {
        let call = card;
        if (!call && live) {
          dropSpinner();
          call = callCard({ id: chunk.toolCallId, name: chunk.toolName });
          cards.set(chunk.toolCallId, call);
          live.el.append(call.el);
        }
        if (chunk.type === 'tool-input-available') call?.args(chunk.input);
        break;
      }
      case 'tool-input-delta': {
        if (!live) break;
        const text = (live.args.get(chunk.toolCallId) ?? '') + chunk.inputTextDelta;
        live.args.set(chunk.toolCallId, text);
        card?.argsText(text);
        break;
      }
      case 'tool-output-available':
        if (chunk.preliminary) {
          card?.status('running', 'live');
          card?.progress(chunk.output);
        } else {
          card?.result({ content: chunk.output, isError: false });
        }
        break;
      case 'tool-input-error':
      case 'tool-output-error':
        card?.result({ content: chunk.errorText, isError: true });
        break;
      case 'tool-output-denied':
        card?.result({ content: 'the user denied this call', isError: true });
        break;
      case 'tool-approval-request':
        card?.status('needs approval', 'warn');
        break;
      case 'error':
        notices.push(chunk.errorText);
        bubble('notice', errorBox({ code: 'error', message: chunk.errorText }));
        break;
      default:
        break;
    }
  };

  /** The conversation as the session keeps it, and the calls that wait for the user. */
  const showConversation = (session) => {
    cards.clear();
    pending.clear();
    messages.replaceChildren();
    hint.textContent = '';
    for (const message of session.messages) render(message);
    if (session.status === 'awaiting_tool_execution') {
      const approvals = session.pendingApprovals ?? [];
      const client = session.pendingToolCalls;
      if (client.length) waitFor(client, 'client');
      if (approvals.length) waitFor(approvals, 'approval');
    }
    messages.dataset.restored = String(session.messages.length);
    scroll();
  };

  /** Reads the session: `null` (and the chat forgotten) if it is gone. */
  const readSession = async () => {
    try {
      return await getJson(`${base}/session/${seg(sessionId)}`);
    } catch (error) {
      if (error instanceof ApiError && error.status === 404) {
        bubble('notice', h('span', { class: 'muted', text: 'The chat this page had is gone: this is a new one.' }));
        forget();
      } else {
        bubble('notice', errorBox(error));
      }
      return null;
    }
  };

  /**
   * Reads an answer (`POST /chat` with `body`, or the running one from `path` without), then
   * the conversation as the session keeps it. `onStart` runs once the answer's head is in.
   */
  const follow = async (path, body, onStart) => {
    const mine = generation;
    reading = new AbortController();
    setBusy(true);
    notices = [];
    let started = false;
    let failure = null;
    try {
      await readEvents(path, {
        body,
        signal: reading.signal,
        onResponse: () => {
          started = true;
          onStart?.();
          messages.dataset.following = 'true';
        },
        onEvent: (name, chunk) => {
          if (mine === generation) onChunk(name, chunk);
        },
      });
    } catch (error) {
      failure = error;
    }
    if (mine !== generation) return;
    reading = null;
    live = null;
    delete messages.dataset.following;
    if (failure && !started) {
      // Refused before any answer: nothing ran.
      bubble('notice', errorBox(failure));
      messages.dataset.restored ??= String(messages.children.length);
    } else {
      if (failure && failure.name !== 'AbortError') notices.push(failure.message);
      const session = sessionId ? await readSession() : null;
      if (mine !== generation) return;
      if (session) {
        showConversation(session);
        const last = session.messages.at(-1);
        if (last?.role !== 'error') for (const text of notices) bubble('notice', errorBox({ code: 'error', message: text }));
      }
    }
    stopping = false;
    setBusy(false);
  };

  /** Every waiting call answered: one request carries the decisions and results. */
  const resume = () => {
    const parts = [];
    for (const { call, kind, answer } of pending.values()) {
      const part = { type: `tool-${call.name}`, toolCallId: call.id, input: call.arguments ?? {} };
      if (kind === 'approval') {
        parts.push({ ...part, state: 'approval-responded', approval: { id: `approval-${call.id}`, approved: answer.approved, reason: answer.reason } });
      } else {
        parts.push(answer.isError
          ? { ...part, state: 'output-error', errorText: answer.content }
          : { ...part, state: 'output-available', output: answer.content });
        cards.get(call.id)?.result(answer);
      }
    }
    pending.clear();
    hint.textContent = '';
    sent += 1;
    follow(`${chat}/chat`, { id: sessionId, messages: [{ id: `answers-${Date.now()}-${sent}`, role: 'assistant', parts }] });
  };

  const send = () => {
    const text = composer.value.trim();
    if (!text || reading || pending.size) return;
    composer.value = '';
    render({ role: 'user', content: text });
    const id = sessionId ?? newChatId();
    sent += 1;
    const body = { id, messages: [{ id: `user-${Date.now()}-${sent}`, role: 'user', parts: [{ type: 'text', text }] }] };
    if (!sessionId) body.tools = PAGE_TOOLS.filter((_, i) => toolBoxes[i].checked);
    return follow(`${chat}/chat`, body, () => {
      if (id !== sessionId) {
        sessionId = id;
        localStorage.setItem(sessionKey(agent.name), id);
        showSession();
      }
    });
  };

  /** Stops the running answer: aborts its turn, which ends at its next lease renewal. */
  const stop = async () => {
    if (!reading || stopping || !sessionId) return;
    stopping = true;
    setBusy(true);
    try {
      await postJson(`api/agents/${seg(agent.name)}/sessions/${seg(sessionId)}/abort`, {});
    } catch (error) {
      bubble('notice', errorBox(error));
    }
  };

  /** The stored conversation, after a reload, and the answer still running on it, if any. */
  const restore = async () => {
    if (!sessionId) return;
    const session = await readSession();
    if (!session) return;
    showConversation(session);
    delete messages.dataset.restored;
    // A running answer's session shows the question it answers: the rest follows.
    await follow(`${chat}/chat/${seg(sessionId)}/stream`);
  };
  const forget = () => {
    sessionId = null;
    localStorage.removeItem(sessionKey(agent.name));
    showSession();
  };

  sendButton.addEventListener('click', send);
  composer.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && !event.shiftKey) {
      event.preventDefault();
      send();
    }
  });
  stopButton.addEventListener('click', stop);
  // A new chat leaves the answer of the last one running: it is kept in its session.
  const newChat = h('button', { type: 'button', class: 'small new-chat', text: 'New chat', onclick: () => {
    generation += 1;
    reading?.abort();
    reading = null;
    stopping = false;
    live = null;
    forget();
    cards.clear();
    pending.clear();
    messages.replaceChildren();
    hint.textContent = '';
    setBusy(false);
  } });

  const toolChips = agent.tools.map((tool) => h('span', { class: 'chip', title: tool.description },
    h('code', { text: tool.name }), tool.needsApproval ? badge('approval', 'warn') : null, tool.local ? null : badge('client', 'kind')));
  const el = h('section', { class: 'view chat', dataset: { agent: agent.name } },
    h('header', { class: 'view-head' },
      h('h2', {}, agent.name, ' ', badge('agent', 'kind')),
      h('div', { class: 'chat-meta' }, sessionLabel, newChat),
      toolChips.length ? h('div', { class: 'chips' }, 'tools: ', toolChips) : null,
      h('div', { class: 'page-tools' }, h('span', { class: 'muted', text: 'page tools for new chats: ' }),
        PAGE_TOOLS.map((tool, i) => h('label', { class: 'check', title: tool.description }, toolBoxes[i], h('code', { text: tool.name }))))),
    messages,
    busy,
    h('div', { class: 'composer-row' }, composer, sendButton, stopButton),
    hint);
  showSession();
  restore();
  return { el };
}

// A chat with an agent on its execute endpoint (`POST /agent/{name}/execute`, SSE of agent
// events). Answers stream in as markdown; tool calls show as cards; calls waiting for the user
// (approvals, client tools) are answered with buttons, all at once in one resuming request.
// The session's id is kept in localStorage: a reload reads the conversation back from
// `GET /agent/{name}/session/{id}`.

import { h, replace, errorBox, badge, shortId } from './dom.js';
import { getJson, postEvents, seg, ApiError } from './api.js';
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

/** A chat with `agent` (an entry of `GET /dev/api/agents`). */
export function chatView(agent) {
  const base = `../agent/${seg(agent.name)}`;
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
  const own = new Map(agent.tools.map((tool) => [tool.name, tool]));

  let sessionId = localStorage.getItem(sessionKey(agent.name));
  let controller = null;
  const cards = new Map();
  const pending = new Map();
  let live = null;

  const showSession = () => {
    replace(sessionLabel, sessionId ? ['session ', shortId(sessionId, 12)] : h('span', { class: 'muted', text: 'new chat' }));
    sessionLabel.dataset.session = sessionId ?? '';
    toolBoxes.forEach((box) => { box.disabled = Boolean(sessionId); });
  };
  const setBusy = (on) => {
    busy.hidden = !on;
    stopButton.hidden = !on;
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

  const onEvent = (name, data) => {
    switch (name) {
      case 'message_start':
        if (data.role === 'assistant') live = { el: bubble('assistant', h('span', { class: 'spinner' })), block: null, calls: [] };
        break;
      case 'text_start':
      case 'thinking_start':
        if (!live) break;
        live.el.querySelector(':scope > .spinner')?.remove();
        live.block = name === 'text_start'
          ? { text: '', el: h('div', { class: 'md' }) }
          : { text: '', el: h('div', { class: 'plain' }) };
        live.el.append(name === 'text_start' ? live.block.el : h('details', { class: 'thinking', open: true }, h('summary', { text: 'thinking' }), live.block.el));
        break;
      case 'text_delta':
      case 'thinking_delta':
        if (!live?.block) break;
        live.block.text += data.delta;
        if (name === 'text_delta') replace(live.block.el, markdown(live.block.text));
        else live.block.el.textContent = live.block.text;
        scroll();
        break;
      case 'toolcall_start': {
        if (!live) break;
        live.el.querySelector(':scope > .spinner')?.remove();
        const card = callCard({ id: data.toolCallId, name: data.toolName });
        live.calls[data.index] = { card, text: '' };
        live.el.append(card.el);
        break;
      }
      case 'toolcall_delta': {
        const call = live?.calls[data.index];
        if (call) call.card.argsText((call.text += data.delta));
        break;
      }
      case 'toolcall_end':
        live?.calls[data.index]?.card.args(data.toolCall.arguments);
        break;
      case 'message_end':
        if (live && ['assistant', 'error', 'aborted'].includes(data.message.role)) {
          render(data.message, live.el);
          live = null;
        } else if (data.message.role === 'toolResult') {
          render(data.message);
        }
        break;
      case 'tool_execution_start':
        cards.get(data.toolCallId)?.status('running', 'live');
        break;
      case 'tool_execution_delta':
        cards.get(data.toolCallId)?.output(data.delta);
        break;
      case 'tool_execution_end':
        cards.get(data.toolCallId)?.result({ content: data.output, isError: data.isError });
        break;
      case 'awaiting_tool_execution':
        waitFor(data.toolCalls, 'client');
        break;
      case 'awaiting_approval':
        waitFor(data.toolCalls, 'approval');
        break;
      case 'error':
        bubble('notice', errorBox({ code: data.code, message: data.error }));
        break;
      default:
        break;
    }
  };

  /** One execution with `body`; its events render as they come. */
  const execute = async (body) => {
    controller = new AbortController();
    setBusy(true);
    try {
      await postEvents(`${base}/execute`, body, {
        onEvent,
        signal: controller.signal,
        onResponse: (response) => {
          const id = response.headers.get('x-session-id');
          if (id && id !== sessionId) {
            sessionId = id;
            localStorage.setItem(sessionKey(agent.name), id);
            showSession();
          }
        },
      });
    } catch (error) {
      if (error.name === 'AbortError') {
        live?.el.append(badge('stopped', 'idle'));
        bubble('notice', h('span', { class: 'muted', text: 'Stopped: the answer so far is kept in the session.' }));
      } else {
        bubble('notice', errorBox(error));
      }
    } finally {
      live?.el.querySelector(':scope > .spinner')?.remove();
      live = null;
      controller = null;
      setBusy(false);
      if (pending.size === 0) hint.textContent = '';
    }
  };

  /** Every waiting call answered: one request carries the decisions and results. */
  const resume = () => {
    const approvals = [];
    const results = [];
    for (const { call, kind, answer } of pending.values()) {
      if (kind === 'approval') {
        approvals.push({ toolCallId: call.id, approved: answer.approved, reason: answer.reason, arguments: call.arguments });
      } else {
        results.push({ toolCallId: call.id, toolName: call.name, content: answer.content, isError: answer.isError });
        cards.get(call.id)?.result(answer);
      }
    }
    pending.clear();
    hint.textContent = '';
    execute({ sessionId, input: { approvals, results } });
  };

  const send = () => {
    const text = composer.value.trim();
    if (!text || controller || pending.size) return;
    composer.value = '';
    render({ role: 'user', content: text });
    const input = { content: text };
    if (sessionId) return execute({ sessionId, input });
    const tools = PAGE_TOOLS.filter((_, i) => toolBoxes[i].checked);
    return execute({ input, context: { tools } });
  };

  /** The stored conversation, after a reload. */
  const restore = async () => {
    if (!sessionId) return;
    let session;
    try {
      session = await getJson(`${base}/session/${seg(sessionId)}`);
    } catch (error) {
      if (error instanceof ApiError && error.status === 404) {
        bubble('notice', h('span', { class: 'muted', text: 'The chat this page had is gone: this is a new one.' }));
        forget();
      } else {
        bubble('notice', errorBox(error));
      }
      return;
    }
    for (const message of session.messages) render(message);
    if (session.status === 'awaiting_tool_execution') {
      const approvals = session.pendingToolCalls.filter((call) => own.get(call.name)?.needsApproval);
      const client = session.pendingToolCalls.filter((call) => !own.get(call.name)?.needsApproval);
      if (client.length) waitFor(client, 'client');
      if (approvals.length) waitFor(approvals, 'approval');
    }
    messages.dataset.restored = String(session.messages.length);
    scroll();
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
  stopButton.addEventListener('click', () => controller?.abort());
  const newChat = h('button', { type: 'button', class: 'small new-chat', text: 'New chat', onclick: () => {
    if (controller) controller.abort();
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

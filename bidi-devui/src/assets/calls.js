// Tool calls in a chat: a card per call (its tool, arguments, progress and result), the
// buttons that answer a call waiting for the user (approve or deny; the page's own tools
// `confirm` and `pick_color`; a result typed by hand for any other client tool), and the
// page's tools as a session declares them.

import { h, replace, jsonView, badge } from './dom.js';

/** The tools the page declares to a new session and answers itself, with buttons. */
export const PAGE_TOOLS = [
  {
    name: 'confirm',
    description: 'Asks the user a yes-or-no question; answers "yes" or "no".',
    parameters: {
      type: 'object',
      properties: { question: { type: 'string', description: 'The question to ask.' } },
    },
  },
  {
    name: 'pick_color',
    description: 'Asks the user to pick a colour; answers the colour picked.',
    parameters: {
      type: 'object',
      properties: {
        options: { type: 'array', items: { type: 'string' }, description: 'The colours to choose from (CSS names).' },
      },
    },
  },
];

const PALETTE = ['red', 'orange', 'gold', 'green', 'blue', 'purple'];

/** What the call asks, for the buttons' caption: a field it names, or its arguments. */
function asked(args, ...fields) {
  for (const field of fields) if (typeof args?.[field] === 'string') return args[field];
  return JSON.stringify(args ?? {});
}

/**
 * A call's card: `{el, args(value), argsText(text), status(text, kind), output(delta),
 * progress(text), result({content, isError}), ask(kind, answer)}`. `answer(reply)` is called with the user's
 * reply: `{approved, reason}` for an approval, `{content, isError}` for a client tool.
 */
export function callCard(call) {
  const status = badge('calling', 'warn');
  const args = h('div', { class: 'call-args' });
  const output = h('pre', { class: 'call-output', hidden: true });
  const result = h('div', { class: 'call-result', hidden: true });
  const ask = h('div', { class: 'call-ask', hidden: true });
  const el = h('div', { class: 'tool-call', dataset: { callId: call.id ?? '', tool: call.name ?? '' } },
    h('div', { class: 'call-head' }, h('span', { class: 'call-icon', 'aria-hidden': 'true', text: '⚙' }), h('code', { class: 'call-name', text: call.name ?? '' }), status),
    args, output, result, ask);
  const card = {
    el,
    call,
    args(value) {
      call.arguments = value;
      replace(args, jsonView(value, { compact: true }));
    },
    argsText(text) {
      replace(args, h('code', { class: 'partial', text }));
    },
    status(text, kind) {
      status.textContent = text;
      status.className = `badge ${kind}`;
      el.dataset.status = text;
    },
    output(delta) {
      output.hidden = false;
      output.textContent += delta;
    },
    progress(text) {
      output.hidden = false;
      output.textContent = text;
    },
    result({ content, isError }) {
      output.hidden = true;
      result.hidden = false;
      ask.hidden = true;
      replace(result, h('span', { class: 'dir dir-in', text: isError ? 'error ' : 'result ' }), h('span', { class: 'result-text', text: content }));
      result.classList.toggle('failed', Boolean(isError));
      card.status(isError ? (/denied/.test(content) ? 'denied' : 'failed') : 'done', isError ? 'bad' : 'ok');
    },
    ask(kind, answer) {
      ask.hidden = false;
      replace(ask, kind === 'approval' ? approvalButtons(card, answer) : clientButtons(card, answer));
      card.status(kind === 'approval' ? 'needs approval' : 'waiting for you', 'warn');
    },
    decided(text) {
      ask.querySelectorAll('button, input, textarea').forEach((e) => { e.disabled = true; });
      ask.append(h('span', { class: 'decided', text }));
      card.status('answered', 'idle');
    },
  };
  if (call.arguments !== undefined) card.args(call.arguments);
  return card;
}

/** Approve / Deny, with an optional reason the model reads on a denial. */
function approvalButtons(card, answer) {
  const reason = h('input', { class: 'in reason', type: 'text', placeholder: 'reason (optional)', 'aria-label': 'reason' });
  const decide = (approved) => {
    answer({ approved, reason: reason.value.trim() || undefined });
    card.decided(approved ? 'approved' : 'denied');
  };
  return [
    h('span', { class: 'ask-text', text: `Run ${card.call.name}?` }),
    h('div', { class: 'actions' },
      h('button', { type: 'button', class: 'primary approve', text: 'Approve', onclick: () => decide(true) }),
      h('button', { type: 'button', class: 'danger deny', text: 'Deny', onclick: () => decide(false) }),
      reason),
  ];
}

/** The buttons of the page's tools, or a result typed by hand for any other client tool. */
function clientButtons(card, answer) {
  const { name, arguments: args } = card.call;
  const reply = (content, isError = false) => {
    answer({ content, isError });
    card.decided(isError ? `answered as an error: ${content}` : `answered: ${content}`);
  };
  if (name === 'confirm') {
    return [
      h('span', { class: 'ask-text', text: asked(args, 'question', 'request') }),
      h('div', { class: 'actions' },
        h('button', { type: 'button', class: 'primary yes', text: 'Yes', onclick: () => reply('yes') }),
        h('button', { type: 'button', class: 'no', text: 'No', onclick: () => reply('no') })),
    ];
  }
  if (name === 'pick_color') {
    const options = Array.isArray(args?.options) && args.options.length && args.options.every((o) => typeof o === 'string') ? args.options : PALETTE;
    return [
      h('span', { class: 'ask-text', text: asked(args, 'request', 'question') }),
      h('div', { class: 'actions colors' }, options.map((color) => {
        const swatch = h('span', { class: 'swatch', 'aria-hidden': 'true' });
        swatch.style.background = color;
        return h('button', { type: 'button', class: 'color-choice', dataset: { color }, onclick: () => reply(color) }, swatch, color);
      })),
    ];
  }
  const text = h('textarea', { class: 'in result-in', rows: 2, placeholder: `what ${name} answers`, 'aria-label': `result of ${name}` });
  return [
    h('span', { class: 'ask-text', text: `${name} runs in the client: answer it.` }),
    text,
    h('div', { class: 'actions' },
      h('button', { type: 'button', class: 'primary', text: 'Send result', onclick: () => reply(text.value) }),
      h('button', { type: 'button', class: 'danger', text: 'Send as error', onclick: () => reply(text.value || 'failed', true) })),
  ];
}

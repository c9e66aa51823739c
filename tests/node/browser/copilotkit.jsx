// A React page on CopilotKit's client (`@copilotkit/react-core/v2`) talking straight to a bidi
// server's AG-UI endpoint, for a headless browser. Built into one script by `build.mjs`.
//
// The page reads `?agent=<name>&client=<copilotkit|ag-ui-1>&thread=<id>&prompt=<text>`. The
// agent is an `HttpAgent` on `/agent/<name>/ag-ui`: CopilotKit's own (its pinned
// `@ag-ui/client` 0.0.59, which sends no `protocolVersion`) or `@ag-ui/client` 1.0's. It
// registers what a CopilotKit app does:
//
// - `useFrontendTool` `confirm`: answers `confirmed <action>` in the browser;
// - `useHumanInTheLoop` `ask_user`: shows the question and answers it (the page clicks for the
//   user: `yes, go`);
// - `useInterrupt`: shows the approval the agent asks for and approves it.
//
// The page's user types `prompt` into CopilotKit's chat (`<CopilotChat>`) on the thread and
// sends it. The thread's messages show under <ol id="log">, with what the user was shown.
// Once the agent has answered and nothing waits on the browser, <body> gets `data-done`; a
// failed run shows as <li class="error">.

import { HttpAgent as HttpAgent1 } from '@ag-ui/client';
import {
  CopilotChat,
  CopilotKitProvider,
  HttpAgent,
  useAgent,
  useFrontendTool,
  useHumanInTheLoop,
  useInterrupt,
} from '@copilotkit/react-core/v2';
import { useEffect, useRef, useState } from 'react';
import { createRoot } from 'react-dom/client';
import { z } from 'zod';

const params = new URLSearchParams(location.search);
const name = params.get('agent');
const threadId = params.get('thread');
const prompt = params.get('prompt');
const Client = params.get('client') === 'ag-ui-1' ? HttpAgent1 : HttpAgent;
const agent = new Client({ url: `/agent/${name}/ag-ui`, threadId });
const errors = [];
/** What the user was shown: each question and interrupt, once. */
const seen = new Set();

/** Calls `act` once, when it first mounts: the page's user clicking. */
function Click({ act, label }) {
  const done = useRef(false);
  useEffect(() => {
    if (!done.current) {
      done.current = true;
      act();
    }
  }, [act]);
  return <span className="clicked">{label}</span>;
}

function Tools() {
  useFrontendTool({
    name: 'confirm',
    description: 'Asks the browser to confirm an action',
    parameters: z.object({ action: z.string() }),
    handler: async ({ action }) => `confirmed ${action}`,
  });
  useHumanInTheLoop({
    name: 'ask_user',
    description: 'Asks the user a question',
    parameters: z.object({ question: z.string() }),
    render: ({ args, status, respond }) => {
      if (args.question) seen.add(`asked: ${args.question}`);
      return (
        <div className="ask" data-status={status}>
          {args.question}
          {status === 'executing' ? <Click act={() => respond('yes, go')} label="yes, go" /> : null}
        </div>
      );
    },
  });
  useInterrupt({
    render: ({ interrupt, resolve }) => {
      seen.add(`interrupted: ${interrupt?.reason}`);
      return (
        <div className="interrupt">
          <Click act={() => resolve({ approved: true })} label="approve" />
        </div>
      );
    },
  });
  return null;
}

/** Types `words` into the chat's input and sends them, as the page's user would. */
function type(words) {
  const input = document.querySelector('[data-testid=copilot-chat-textarea]');
  const send = document.querySelector('[data-testid=copilot-send-button]');
  if (!input || !send) {
    setTimeout(() => type(words), 50);
    return;
  }
  const setValue = Object.getOwnPropertyDescriptor(HTMLTextAreaElement.prototype, 'value').set;
  setValue.call(input, words);
  input.dispatchEvent(new Event('input', { bubbles: true }));
  // The send button is enabled once React has seen the text.
  setTimeout(() => document.querySelector('[data-testid=copilot-send-button]').click(), 50);
}

function text(content) {
  if (typeof content === 'string') return content;
  return (content ?? []).map((part) => part.text ?? '').join('');
}

function Log() {
  const { agent, isReady } = useAgent({ agentId: 'default' });
  const [, rerender] = useState(0);
  const sent = useRef(false);
  useEffect(() => {
    const { unsubscribe } = agent.subscribe({
      onMessagesChanged: () => rerender((n) => n + 1),
      onRunErrorEvent: ({ event }) => {
        errors.push(`RUN_ERROR ${event.code}: ${event.message}`);
        rerender((n) => n + 1);
      },
      onRunFailed: ({ error }) => {
        errors.push(String(error));
        rerender((n) => n + 1);
      },
    });
    return unsubscribe;
  }, [agent]);
  useEffect(() => {
    if (sent.current || !isReady) return;
    sent.current = true;
    type(prompt);
  }, [isReady]);
  const last = agent.messages.at(-1);
  const answered = last?.role === 'assistant' && !last.toolCalls?.length;
  const done = errors.length > 0 || (!agent.isRunning && answered);
  useEffect(() => {
    if (done) document.body.dataset.done = '1';
  }, [done]);
  return (
    <ol id="log">
      {agent.messages.map((message) => (
        <li key={message.id} className={message.role}>
          {text(message.content)}
          {(message.toolCalls ?? []).map((call) => (
            <span key={call.id} className="call">{`${call.function.name}(${call.function.arguments})`}</span>
          ))}
        </li>
      ))}
      {[...seen].map((shown) => (
        <li key={shown} className="seen">{shown}</li>
      ))}
      {errors.map((error, i) => (
        <li key={i} className="error">{error}</li>
      ))}
    </ol>
  );
}

createRoot(document.getElementById('root')).render(
  <CopilotKitProvider selfManagedAgents={{ default: agent }}>
    <Tools />
    <Log />
    <CopilotChat agentId="default" threadId={threadId} />
  </CopilotKitProvider>,
);

// The web side of the conversation `demo/tests/one_conversation.rs` holds with bidi-demo over
// every wire: the AI SDK's own client (`ai@6`: DefaultChatTransport + readUIMessageStream, what
// `useChat` runs) on the assistant's UI message stream, `POST /agent/assistant/chat`. The
// assistant runs the demo model: it calls `word_count` on the message, then answers
// "Done: N words".
//
// Usage: node one_conversation.mjs <baseUrl> start <chatId>
//          starts chat <chatId> with "hello from the web"
//        node one_conversation.mjs <baseUrl> resume <chatId> <earlier user message>...
//          reloads the chat as `useChat({ messages })` does after a reload, checks that its
//          user messages are the ones given, in order, each answered, and goes on with
//          "back on the web"

import { DefaultChatTransport, readUIMessageStream, validateUIMessages } from 'ai';

import { assert, assertJson, check, run } from './harness.mjs';

const user = (id, text) => ({ id, role: 'user', parts: [{ type: 'text', text }] });

/** Sends `messages` as `useChat` does; returns the final assistant message. */
async function send(base, chatId, messages) {
  const transport = new DefaultChatTransport({ api: `${base}/agent/assistant/chat` });
  const stream = await transport.sendMessages({
    chatId,
    messages,
    trigger: 'submit-message',
    messageId: undefined,
    abortSignal: undefined,
  });
  let last;
  for await (const snapshot of readUIMessageStream({ stream, terminateOnError: true })) {
    last = snapshot;
  }
  return last;
}

/** A message's text parts, joined. */
const text = (message) =>
  message.parts
    .filter((part) => part.type === 'text')
    .map((part) => part.text)
    .join('');

/** Checks the demo model's answer to `said`: `word_count` ran on it, and its result is told. */
function answered(message, said) {
  assert(message?.role === 'assistant', () => `not an answer: ${JSON.stringify(message)}`);
  const words = said.split(/\s+/).length;
  const tool = message.parts.find((part) => part.type === 'tool-word_count');
  assert(tool?.state === 'output-available', () => `word_count did not run: ${JSON.stringify(message.parts)}`);
  assert(text(message).endsWith(`Done: ${words} words`), () => `the answer: ${text(message)}`);
}

await run(async (base) => {
  const [step, chatId, ...earlier] = process.argv.slice(3);
  if (step === 'start') {
    await check('useChat starts the conversation on the UI message stream', async () => {
      answered(await send(base, chatId, [user('u1', 'hello from the web')]), 'hello from the web');
    });
  } else if (step === 'resume') {
    await check('the reloaded chat holds every turn, whichever wire took it, in order', async () => {
      const response = await fetch(`${base}/agent/assistant/chat/${chatId}`);
      assert(response.status === 200, `status ${response.status}`);
      const messages = await validateUIMessages({ messages: await response.json() });
      const users = messages.filter((message) => message.role === 'user').map(text);
      assertJson(users, earlier, 'the user messages');
      messages.forEach((message, i) => {
        if (message.role === 'user') answered(messages[i + 1], text(message));
      });
      const last = await send(base, chatId, [...messages, user('u-back', 'back on the web')]);
      answered(last, 'back on the web');
    });
  } else {
    await check(`a step: start or resume, not ${step}`, async () => {
      throw new Error('usage: node one_conversation.mjs <baseUrl> start|resume <chatId> [messages...]');
    });
  }
});

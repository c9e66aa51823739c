// The AI SDK's `DefaultChatTransport` (`ai`, as `useChat` uses it) reconnecting to another
// server process: the chat's answer streams on process A, the page reloads and resumes it on
// process B (`reconnectToStream`, `GET {api}/{chatId}/stream`), which shares A's PostgreSQL
// store and reads the rest of the answer from there.
//
// The servers are two `serve` examples on one database; their `assistant` answers a message
// containing "slowly" after three seconds, with "You said: <message>".
//
// Usage: node vercel_reconnect.mjs <baseUrl of A> <baseUrl of B>

import { DefaultChatTransport, readUIMessageStream } from 'ai';

import { assert, assertJson, check, run } from './harness.mjs';

const user = (id, text) => ({ id, role: 'user', parts: [{ type: 'text', text }] });

/** The final message a UI message stream makes. */
async function read(stream) {
  let last;
  for await (const snapshot of readUIMessageStream({ stream })) {
    last = snapshot;
  }
  return last;
}

const text = (message) =>
  message.parts.filter((part) => part.type === 'text').map((part) => part.text).join('');

await run(async (a) => {
  const b = process.argv[3]?.replace(/\/+$/, '');
  assert(b, 'usage: node vercel_reconnect.mjs <A> <B>');

  await check('an answer streaming on A is resumed on B, from its first chunk to its end', async () => {
    const chatId = `reconnect-${process.pid}`;
    const onA = new DefaultChatTransport({ api: `${a}/agent/assistant/chat` });
    const first = await onA.sendMessages({
      chatId,
      messages: [user('u1', 'answer slowly')],
      trigger: 'submit-message',
      messageId: undefined,
      abortSignal: undefined,
    });
    // The page goes away while the model thinks: A's answer runs on.
    const reader = first.getReader();
    const head = await reader.read();
    assert(!head.done, 'A streamed nothing');
    await reader.cancel();
    const onB = new DefaultChatTransport({ api: `${b}/agent/assistant/chat` });
    const resumed = await onB.reconnectToStream({ chatId });
    assert(resumed !== null, 'B found nothing to resume (204)');
    const message = await read(resumed);
    assertJson(text(message), 'You said: answer slowly', 'the resumed answer');
    assertJson(message.role, 'assistant', 'role');
  });

  await check('B answers 204 (null) for a chat nobody is streaming', async () => {
    const onB = new DefaultChatTransport({ api: `${b}/agent/assistant/chat` });
    assertJson(await onB.reconnectToStream({ chatId: `idle-${process.pid}` }), null, 'nothing');
  });
});

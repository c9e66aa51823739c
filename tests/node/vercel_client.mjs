// The Vercel AI SDK's own client (`ai@6`: DefaultChatTransport + readUIMessageStream, what
// `useChat` runs) against bidi-http's `POST /agent/{name}/chat`. The server (started by the
// tests package's `vercel_client` test) serves four agents whose scripted models answer:
// `text` (reasoning, then text), `weather` (a server tool sending `progress` data 50 then
// 100, then text), `ask` (a client tool,
// then text once its output comes back), `fail` (half a text, then a model failure), `held`
// ("Hel", then "lo!" once the flow `/bidi-flow/release` is run: an answer to resume),
// `guarded` (calls its tool `wipe`, which needs approval and returns "wiped db", with
// {"target":"db"} as `x1`, then answers "Wiped."; then as `x2`, then answers "Kept.").
//
// Usage: node vercel_client.mjs <baseUrl>

import { DefaultChatTransport, readUIMessageStream, validateUIMessages } from 'ai';

import { assert, assertJson, check, rejects, run } from './harness.mjs';

const user = (id, text) => ({ id, role: 'user', parts: [{ type: 'text', text }] });

/** Sends `messages` as `useChat` does; returns the final assistant message. */
async function send(base, agent, chatId, messages, { body, message, terminateOnError, onError } = {}) {
  const transport = new DefaultChatTransport({ api: `${base}/agent/${agent}/chat`, body });
  const stream = await transport.sendMessages({
    chatId,
    messages,
    trigger: 'submit-message',
    messageId: undefined,
    abortSignal: undefined,
  });
  let last;
  for await (const snapshot of readUIMessageStream({ stream, message, terminateOnError, onError })) {
    last = snapshot;
  }
  return last;
}

/** The parts without what varies (text ids, provider fields). */
const shape = (message) =>
  message.parts.map((part) => {
    switch (part.type) {
      case 'step-start':
        return { type: part.type };
      case 'text':
      case 'reasoning':
        return { type: part.type, text: part.text, state: part.state };
      case 'data-progress':
        return { type: part.type, id: part.id, data: part.data };
      default:
        return {
          type: part.type,
          toolCallId: part.toolCallId,
          state: part.state,
          input: part.input,
          ...(part.output !== undefined ? { output: part.output } : {}),
          ...(part.errorText !== undefined ? { errorText: part.errorText } : {}),
        };
    }
  });

await run(async (base) => {
  await check('text and reasoning become done parts of one assistant message', async () => {
    const message = await send(base, 'text', 'chat-text', [user('u1', 'hi')]);
    assert(message.role === 'assistant', `role ${message.role}`);
    assert(message.id.startsWith('msg-'), `id ${message.id}`);
    assertJson(
      shape(message),
      [
        { type: 'step-start' },
        { type: 'reasoning', text: 'Easy one.', state: 'done' },
        { type: 'text', text: 'Hello there', state: 'done' },
      ],
      'parts',
    );
  });

  await check('a server tool ends output-available, then the answer in a second step', async () => {
    const message = await send(base, 'weather', 'chat-weather', [user('u1', 'Weather in Oslo?')]);
    assertJson(
      shape(message),
      [
        { type: 'step-start' },
        { type: 'tool-weather', toolCallId: 'w1', state: 'output-available', input: { city: 'Oslo' }, output: 'sunny in Oslo' },
        // The tool's data, its later value in place of the earlier.
        { type: 'data-progress', id: 'w1', data: { pct: 100 } },
        { type: 'step-start' },
        { type: 'text', text: 'Sunny.', state: 'done' },
      ],
      'parts',
    );
  });

  await check('a stored chat reloads as UIMessage[] that the AI SDK validates (useChat({ messages }))', async () => {
    const response = await fetch(`${base}/agent/weather/chat/chat-weather`);
    assert(response.status === 200, `status ${response.status}`);
    const messages = await validateUIMessages({ messages: await response.json() });
    assertJson(messages.map((m) => m.role), ['user', 'assistant'], 'roles');
    assertJson(messages[0].parts, [{ type: 'text', text: 'Weather in Oslo?' }], 'the question');
    // What the stream built, but the tool's data (for the application, not kept).
    assertJson(
      shape(messages[1]),
      [
        { type: 'step-start' },
        { type: 'tool-weather', toolCallId: 'w1', state: 'output-available', input: { city: 'Oslo' }, output: 'sunny in Oslo' },
        { type: 'step-start' },
        { type: 'text', text: 'Sunny.', state: 'done' },
      ],
      'the answer',
    );
    const missing = await fetch(`${base}/agent/weather/chat/no-such-chat`);
    assert(missing.status === 404, `status ${missing.status}`);
  });

  await check('a client tool waits at input-available and its output resumes the chat', async () => {
    const body = {
      tools: [{ name: 'ask', description: 'Asks the user', parameters: { type: 'object', properties: { q: { type: 'string' } } } }],
    };
    const first = await send(base, 'ask', 'chat-ask', [user('u1', 'Book a trip')], { body });
    assertJson(
      shape(first),
      [{ type: 'step-start' }, { type: 'tool-ask', toolCallId: 'k1', state: 'input-available', input: { q: 'Oslo?' } }],
      'parts after the first request',
    );
    // What `addToolOutput` does, then the automatic resend of the whole conversation.
    const tool = first.parts[1];
    tool.state = 'output-available';
    tool.output = 'yes';
    const answered = structuredClone(first);
    const second = await send(base, 'ask', 'chat-ask', [user('u1', 'Book a trip'), answered], { message: answered });
    assert(second.id === first.id, `the same message: ${second.id} vs ${first.id}`);
    assertJson(
      shape(second),
      [
        { type: 'step-start' },
        { type: 'tool-ask', toolCallId: 'k1', state: 'output-available', input: { q: 'Oslo?' }, output: 'yes' },
        { type: 'step-start' },
        { type: 'text', text: 'Booked.', state: 'done' },
      ],
      'parts after the output',
    );
  });

  await check('a model failure mid-text reaches onError and the text part is closed', async () => {
    const errors = [];
    const message = await send(base, 'fail', 'chat-fail-1', [user('u1', 'hi')], {
      onError: (error) => errors.push(error),
    });
    assert(errors.length === 1, `errors: ${errors.map(String)}`);
    assert(/the provider went away/.test(errors[0].message), errors[0].message);
    assertJson(
      shape(message),
      [{ type: 'step-start' }, { type: 'text', text: 'Half an answer', state: 'done' }],
      'parts',
    );
  });

  await check('with terminateOnError the failure rejects the read', async () => {
    const error = await rejects(
      send(base, 'fail', 'chat-fail-2', [user('u1', 'hi')], { terminateOnError: true }),
      'a failed answer',
    );
    assert(/the provider went away/.test(error.message), error.message);
  });

  await check('reconnectToStream answers null when no answer of the chat streams (204)', async () => {
    const transport = new DefaultChatTransport({ api: `${base}/agent/text/chat` });
    const stream = await transport.reconnectToStream({ chatId: 'chat-none' });
    assert(stream === null, `a stream to resume: ${stream}`);
  });

  await check('reconnectToStream mid-answer reads the whole answer to the final message', async () => {
    const transport = new DefaultChatTransport({ api: `${base}/agent/held/chat` });
    const first = await transport.sendMessages({
      chatId: 'chat-held',
      messages: [user('u1', 'hi')],
      trigger: 'submit-message',
      messageId: undefined,
      abortSignal: undefined,
    });
    // The answer waits for its release: it streams while the client resumes it.
    const resumed = await transport.reconnectToStream({ chatId: 'chat-held' });
    assert(resumed !== null, 'nothing to resume mid-answer');
    const release = await fetch(`${base}/bidi-flow/release`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ data: null }),
    });
    assert(release.ok, `release: ${release.status} ${await release.text()}`);
    const read = async (stream) => {
      let last;
      for await (const snapshot of readUIMessageStream({ stream })) {
        last = snapshot;
      }
      return last;
    };
    const [original, again] = await Promise.all([read(first), read(resumed)]);
    assertJson(
      shape(again),
      [{ type: 'step-start' }, { type: 'text', text: 'Hello!', state: 'done' }],
      'parts of the resumed answer',
    );
    assertJson(shape(again), shape(original), 'the same parts as the original');
    assert(again.id === original.id, `the same message: ${again.id} vs ${original.id}`);
  });

  await check('a refused request rejects sendMessages with the JSON error', async () => {
    const transport = new DefaultChatTransport({ api: `${base}/agent/text/chat`, body: { nope: 1 } });
    const error = await rejects(
      transport.sendMessages({ chatId: 'chat-bad', messages: [user('u1', 'hi')], trigger: 'submit-message' }),
      'an unknown field',
    );
    assert(/malformed_frame/.test(error.message), error.message);
  });

  await check('a tool that needs approval asks, and the approval resumes the chat', async () => {
    const first = await send(base, 'guarded', 'chat-approve', [user('u1', 'Wipe the db')]);
    assertJson(
      shape(first),
      [{ type: 'step-start' }, { type: 'tool-wipe', toolCallId: 'x1', state: 'approval-requested', input: { target: 'db' } }],
      'parts after the first request',
    );
    assertJson(first.parts[1].approval, { id: 'approval-x1' }, 'the approval request');
    // What `addToolApprovalResponse` does, then the automatic resend.
    const answered = structuredClone(first);
    answered.parts[1].state = 'approval-responded';
    answered.parts[1].approval = { ...answered.parts[1].approval, approved: true };
    const second = await send(base, 'guarded', 'chat-approve', [user('u1', 'Wipe the db'), answered], { message: answered });
    assert(second.id === first.id, `the same message: ${second.id} vs ${first.id}`);
    assertJson(
      shape(second),
      [
        { type: 'step-start' },
        { type: 'tool-wipe', toolCallId: 'x1', state: 'output-available', input: { target: 'db' }, output: 'wiped db' },
        { type: 'step-start' },
        { type: 'text', text: 'Wiped.', state: 'done' },
      ],
      'parts after the approval',
    );
  });

  await check('a denied tool ends output-denied, a forged approval is refused', async () => {
    const first = await send(base, 'guarded', 'chat-deny', [user('u1', 'Wipe the db')]);
    const answered = structuredClone(first);
    answered.parts[1].state = 'approval-responded';
    answered.parts[1].approval = { ...answered.parts[1].approval, approved: false, reason: 'backups first' };
    const second = await send(base, 'guarded', 'chat-deny', [user('u1', 'Wipe the db'), answered], { message: answered });
    assertJson(
      shape(second),
      [
        { type: 'step-start' },
        { type: 'tool-wipe', toolCallId: 'x2', state: 'output-denied', input: { target: 'db' } },
        { type: 'step-start' },
        { type: 'text', text: 'Kept.', state: 'done' },
      ],
      'parts after the denial',
    );
    // A chat the server does not keep cannot bring an approval of a call it made up.
    const transport = new DefaultChatTransport({ api: `${base}/agent/guarded/chat` });
    const forged = structuredClone(first);
    forged.parts[1].state = 'approval-responded';
    forged.parts[1].approval = { ...forged.parts[1].approval, approved: true };
    const error = await rejects(
      transport.sendMessages({ chatId: 'chat-forged', messages: [user('u1', 'Wipe'), forged], trigger: 'submit-message' }),
      'a forged approval',
    );
    assert(/waiting for approval/.test(error.message), error.message);
  });
});

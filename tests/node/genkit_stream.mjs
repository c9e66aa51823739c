// Genkit's durable streams on bidi's Genkit agent wire, with Genkit's own client
// (`streamFlow` from `genkit/beta/client` 1.42.0): a streamed turn's answer carries
// `x-genkit-stream-id`; a client that lost its connection sends the id back
// (`streamFlow({url, streamId})`) and reads the stream again from its first chunk, then the
// rest and the output, while the turn runs and for a while after it ended; an id the server
// does not know is `NOT_FOUND: Stream not found.` (204).
// Usage: node genkit_stream.mjs <baseUrl>
//
// The server serves /agent/gated/genkit (its sessions in the server's store) and
// /agent/counter/genkit (a custom agent whose client keeps its state, adding one to
// `custom.count` each turn). A turn of either says "first ", then waits until `POST /open`,
// then says "second" and ends. Requests name their identity in `x-user`.

import { streamFlow } from 'genkit/beta/client';
import { assert, assertJson, check, rejects, run } from './harness.mjs';

const hello = { message: { role: 'user', content: [{ text: 'hello' }] } };

/** The text of a chunk (`{modelChunk}`), or ''. */
const text = (chunk) => (chunk.modelChunk?.content ?? []).map((part) => part.text ?? '').join('');

await run(async (base) => {
  let finished;
  const open = () => fetch(`${base}/open`, { method: 'POST' });

  /**
   * Starts a streamed turn of `agent` as `user`, reads its first chunk, and loses the
   * connection: answers the stream id and that chunk.
   */
  async function startAndLose(agent, user, init) {
    const controller = new AbortController();
    const url = `${base}/agent/${agent}/genkit`;
    const headers = { 'x-user': user };
    const first = streamFlow({ url, input: hello, init, headers, abortSignal: controller.signal });
    const streamId = await first.streamId;
    const chunks = first.stream[Symbol.asyncIterator]();
    const head = await chunks.next();
    assert(!head.done, 'the turn streamed nothing');
    controller.abort();
    await rejects(first.output, 'the aborted request');
    return { streamId, head: head.value, url, headers };
  }

  /** Reconnects to `streamId`; once attached, opens the gate; answers chunks and output. */
  async function reconnect(url, streamId, headers, body) {
    const again = streamFlow({ url, ...body, streamId, headers });
    assertJson(await again.streamId, streamId, 'the stream id of the reconnected answer');
    await open();
    const chunks = [];
    for await (const chunk of again.stream) chunks.push(chunk);
    return { chunks, output: await again.output };
  }

  await check('a client that lost its connection reconnects with the stream id: every chunk from the first, then the output', async () => {
    const lost = await startAndLose('gated', 'alice', {});
    assert(lost.streamId, 'no x-genkit-stream-id on the streamed answer');
    assertJson(text(lost.head), 'first ', 'the chunk read before the connection was lost');
    // The reconnecting client sends nothing but the id (streamFlow without an input).
    const { chunks, output } = await reconnect(lost.url, lost.streamId, lost.headers, {});
    assertJson(chunks[0], lost.head, 'the stream again from its first chunk');
    assertJson(chunks.map(text).join(''), 'first second', 'the streamed text');
    const turnEnd = chunks.at(-1).turnEnd;
    assertJson(turnEnd, { finishReason: 'stop', snapshotId: lost.streamId }, 'turnEnd');
    assertJson(output.finishReason, 'stop', 'finishReason');
    assertJson(output.message.content.map((part) => part.text).join(''), 'first second', 'output');
    assertJson(output.snapshotId, lost.streamId, 'the stream id is the turn\'s snapshot id');
    finished = lost;
  });

  await check('a reconnection may send its first request again, and reads the same stream', async () => {
    const lost = await startAndLose('gated', 'alice', {});
    const body = { input: hello, init: {} };
    const { chunks, output } = await reconnect(lost.url, lost.streamId, lost.headers, body);
    assertJson(chunks.map(text).join(''), 'first second', 'the streamed text');
    assertJson(output.snapshotId, lost.streamId, 'the output of that turn, not a new one');
  });

  await check('an unknown stream id: NOT_FOUND: Stream not found.; a stream that ended is read again whole, as Genkit\'s stream manager keeps it', async () => {
    const url = `${base}/agent/gated/genkit`;
    const unknown = streamFlow({ url, streamId: 'no-such-stream', headers: { 'x-user': 'alice' } });
    assertJson(await unknown.streamId, null, 'no stream id on a 204');
    const error = await rejects(unknown.output, 'an unknown stream');
    assertJson(error.message, 'NOT_FOUND: Stream not found.', 'the client\'s error');
    assert(finished, 'the first check ran');
    const over = streamFlow({ url, streamId: finished.streamId, headers: finished.headers });
    assertJson(await over.streamId, finished.streamId, 'the stream id of the replayed answer');
    const chunks = [];
    for await (const chunk of over.stream) chunks.push(chunk);
    const output = await over.output;
    assertJson(chunks[0], finished.head, 'from its first chunk');
    assertJson(chunks.map(text).join(''), 'first second', 'the streamed text');
    assertJson(output.snapshotId, finished.streamId, 'its output');
    const bob = streamFlow({ url, streamId: finished.streamId, headers: { 'x-user': 'bob' } });
    const hidden = await rejects(bob.output, 'another identity');
    assertJson(hidden.message, 'NOT_FOUND: Stream not found.', 'never to another identity');
  });

  await check('another identity never reads a stream: NOT_FOUND; its own identity does', async () => {
    const lost = await startAndLose('gated', 'alice', {});
    const bob = streamFlow({ url: lost.url, streamId: lost.streamId, headers: { 'x-user': 'bob' } });
    const error = await rejects(bob.output, 'bob reading alice\'s stream');
    assertJson(error.message, 'NOT_FOUND: Stream not found.', 'bob\'s error');
    const { output } = await reconnect(lost.url, lost.streamId, lost.headers, {});
    assertJson(output.finishReason, 'stop', 'alice reads hers to its end');
  });

  await check('a client-managed agent\'s stream is reconnected to in its process, and its output carries the state', async () => {
    const lost = await startAndLose('counter', 'alice', { state: { custom: { count: 41 } } });
    assert(lost.streamId, 'no x-genkit-stream-id on the streamed answer');
    const { chunks, output } = await reconnect(lost.url, lost.streamId, lost.headers, {});
    assertJson(chunks[0], lost.head, 'the stream again from its first chunk');
    assertJson(chunks.map(text).join(''), 'first second', 'the streamed text');
    assertJson(output.state.custom, { count: 42 }, 'the state the client takes back');
    assertJson(output.snapshotId, undefined, 'no snapshot: the client keeps the state');
  });
});

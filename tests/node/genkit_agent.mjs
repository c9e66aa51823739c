// Genkit's own agent client (`remoteAgent` from `genkit/beta/client` 1.42.0) driving a bidi
// `LlmAgent` over Genkit's agent wire. Usage: node genkit_agent.mjs <baseUrl>
//
// The server serves /agent/echo/genkit: an agent whose model answers "echo: <text>", for the
// text "wait" answers nothing until it is aborted, and for "fail" fails. Its sessions live in the server's store
// ("server-managed" state, in Genkit's terms). It also serves /agent/tally/genkit: a custom
// agent (`LlmAgent::custom`) whose client keeps its state ("client-managed"): each turn adds
// one to `custom.count`, replaces the artifact `tally`, and answers "count: <n>".
//
// Each check names the cases of Genkit's agent conformance spec (tests/specs/agent.yaml in the
// genkit repository) it covers, in brackets.
//
// Refusals reach the client as Genkit's servers send them (a streamed request answered 200, its
// failure in an `error:` record), so that its `AgentError` carries the spec's status.
//
// What the client does (node_modules/@genkit-ai/ai/lib/agent-core.js, genkit/lib/client):
// `chat.send` streams a turn with `{data: {message}, init: {snapshotId} | {}}` and keeps the
// output's `snapshotId` for the next turn; `detach` sends `detach: true` and expects a
// `snapshotId` at once; `getSnapshot` and `abort` POST `{data: {...}}` to `${url}/getSnapshot`
// and `${url}/abort` and read `result`.

import { remoteAgent, streamFlow } from 'genkit/beta/client';
import { assert, assertJson, check, rejects, run } from './harness.mjs';

const roles = (snapshot) => snapshot.state.messages.map((m) => m.role);
const texts = (snapshot) =>
  snapshot.state.messages.map((m) => m.content.map((part) => part.text ?? '').join(''));

await run(async (base) => {
  const agent = remoteAgent({ url: `${base}/agent/echo/genkit` });
  let first;
  let second;

  await check('[spec: simple single turn - server managed] send: a turn answers, with a session and a snapshot', async () => {
    const chat = agent.chat();
    const response = await chat.send('hello');
    assertJson(response.text, 'echo: hello', 'text');
    assertJson(response.finishReason, 'stop', 'finishReason');
    assert(response.snapshotId, () => `no snapshotId: ${JSON.stringify(response.raw)}`);
    assert(response.sessionId, () => `no sessionId: ${JSON.stringify(response.raw)}`);
    first = { chat, snapshotId: response.snapshotId, sessionId: response.sessionId };
    const snapshot = await agent.getSnapshot(response.snapshotId);
    assertJson(snapshot.parentId, undefined, 'the first snapshot has no parent');
  });

  await check('[spec: streaming model chunks] stream: the answer streams in chunks, then the next snapshot follows the first', async () => {
    const { stream, response } = first.chat.sendStream('stream me');
    let text = '';
    for await (const chunk of stream) {
      text += chunk.text;
    }
    const done = await response;
    assertJson(text, 'echo: stream me', 'streamed text');
    assertJson(done.text, 'echo: stream me', 'response text');
    assert(done.snapshotId && done.snapshotId !== first.snapshotId, () => 'a new snapshot');
    assertJson(done.sessionId, first.sessionId, 'the same session');
    second = done.snapshotId;
  });

  await check('[spec: snapshot chaining across invocations; fetch latest snapshot by sessionId] getSnapshot: the latest snapshot chains to the first and holds the conversation', async () => {
    const snapshot = await agent.getSnapshot(second);
    assertJson(snapshot.parentId, first.snapshotId, 'parentId');
    assertJson(snapshot.status, 'completed', 'status');
    assertJson(snapshot.sessionId, first.sessionId, 'sessionId');
    assertJson(roles(snapshot), ['user', 'model', 'user', 'model'], 'roles');
    assertJson(texts(snapshot), ['hello', 'echo: hello', 'stream me', 'echo: stream me'], 'texts');
    const latest = await agent.getSnapshot({ sessionId: first.sessionId });
    assertJson(latest.snapshotId, second, 'the session id finds its latest snapshot');
  });

  await check('[spec: snapshot branching across invocations] resume by snapshot id: a chat at the first snapshot branches from it', async () => {
    const branch = agent.chat({ snapshotId: first.snapshotId });
    const response = await branch.send('branch');
    assertJson(response.text, 'echo: branch', 'text');
    const snapshot = await agent.getSnapshot(response.snapshotId);
    assertJson(snapshot.parentId, first.snapshotId, 'parentId');
    assertJson(texts(snapshot), ['hello', 'echo: hello', 'branch', 'echo: branch'], 'texts');
    const other = await agent.getSnapshot(second);
    assertJson(texts(other).length, 4, 'the other leaf is intact');
  });

  await check('[spec: resume server-managed session by sessionId] loadChat by session id goes on from the latest snapshot', async () => {
    const chat = await agent.loadChat({ sessionId: first.sessionId });
    const response = await chat.send('again');
    assertJson(response.text, 'echo: again', 'text');
    const snapshot = await agent.getSnapshot(response.snapshotId);
    assertJson(texts(snapshot).at(-2), 'again', 'the message is in the session');
    assertJson(texts(snapshot).length, 6, 'after the branch, the latest');
  });

  await check('[spec: abort pending agent; abort already aborted agent] detach, then abort: pending, aborted at once, and the session goes on', async () => {
    const chat = agent.chat();
    const task = await chat.detach('wait');
    assert(task.snapshotId, () => 'no snapshotId');
    const pending = await agent.getSnapshot(task.snapshotId);
    assertJson(pending.status, 'pending', 'status while it runs');
    assertJson(await task.abort(), 'pending', 'the status it had');
    const aborted = await task.wait({ intervalMs: 100 });
    assertJson(aborted.status, 'aborted', 'status after the abort');
    assertJson(await agent.abort(task.snapshotId), 'aborted', 'aborting again changes nothing');
    // An aborted snapshot is not resumable; the session goes on from its last completed one.
    assertJson(chat.snapshotId, task.snapshotId, 'the chat is at the aborted snapshot');
    const refused = await rejects(chat.send('after'), 'resuming an aborted snapshot');
    assertJson(refused.status, 'INVALID_ARGUMENT', 'status');
    assert(/not resumable/.test(refused.message), () => refused.message);
    const response = await agent.chat({ sessionId: aborted.sessionId }).send('after');
    assertJson(response.text, 'echo: after', 'the next turn');
    const after = await agent.getSnapshot(response.snapshotId);
    assertJson(texts(after), ['after', 'echo: after'], 'the aborted turn is not in the history');
    assertJson(after.parentId, undefined, 'it follows no snapshot the client saw');
  });

  await check('[spec: detach and background completion] detach: the turn finishes in the background and its snapshot completes', async () => {
    const task = await agent.chat().detach('in the background');
    const done = await task.wait({ intervalMs: 50 });
    assertJson(done.status, 'completed', 'status');
    assertJson(done.finishReason, 'stop', 'finishReason');
    assertJson(texts(done), ['in the background', 'echo: in the background'], 'texts');
  });

  await check('[spec: detach with background failure; failed snapshot includes error details] detach with a failure: the snapshot fails, with the error', async () => {
    const task = await agent.chat().detach('fail');
    const failed = await task.wait({ intervalMs: 50 });
    assertJson(failed.status, 'failed', 'status');
    assertJson(failed.finishReason, 'failed', 'finishReason');
    assert(/intentional failure/.test(failed.error?.message), () => JSON.stringify(failed.error));
    const error = await rejects(agent.chat({ snapshotId: task.snapshotId }).send('again'), 'resume');
    assertJson(error.status, 'INVALID_ARGUMENT', 'a failed snapshot is not resumable');
    assert(/not resumable/.test(error.message), () => error.message);
  });

  await check('[spec: failed turn returns the last good snapshot; resume by sessionId after a failure] a failed turn: the chat and the session go on from the last completed snapshot', async () => {
    const chat = agent.chat();
    const good = await chat.send('hello');
    const error = await rejects(chat.send('fail'), 'a failed turn');
    assertJson(error.response.finishReason, 'failed', 'finishReason');
    assertJson(error.snapshotId, good.snapshotId, 'the output names the last completed snapshot');
    const failed = await agent.getSnapshot({ sessionId: good.sessionId });
    assertJson(failed.status, 'failed', 'the failed turn has its snapshot');
    assertJson(failed.parentId, good.snapshotId, 'after the last completed one');
    const bySession = await agent.chat({ sessionId: good.sessionId }).send('by session');
    const resumed = await agent.getSnapshot(bySession.snapshotId);
    assertJson(resumed.parentId, good.snapshotId, 'the session goes on from the completed snapshot');
    assertJson(texts(resumed), ['hello', 'echo: hello', 'by session', 'echo: by session'], 'texts');
    const next = await chat.send('next');
    assertJson(texts(await agent.getSnapshot(next.snapshotId)), ['hello', 'echo: hello', 'next', 'echo: next'], 'the chat goes on from there too');
  });

  await check('[spec: respond referencing non-existent tool rejected] a resume that does not fit fails the turn, naming the session and the snapshot it stays at', async () => {
    const chat = agent.chat();
    const good = await chat.send('hello');
    const forged = { toolResponse: { name: 'fakeTool', ref: 'fake-ref', output: 'hacked' } };
    const error = await rejects(chat.resume({ respond: [forged] }), 'a forged resume');
    assertJson(error.status, 'INVALID_ARGUMENT', 'status');
    assertJson(error.response.finishReason, 'failed', 'finishReason');
    assertJson(error.response.sessionId, good.sessionId, 'sessionId');
    assertJson(error.snapshotId, good.snapshotId, 'snapshotId');
    assertJson((await chat.send('still here')).text, 'echo: still here', 'the chat goes on');
  });

  await check('[spec: abort completed agent; abort non-existent snapshot] abort of a completed snapshot leaves it completed; of an unknown one, no status', async () => {
    assertJson(await agent.abort(first.snapshotId), 'completed', 'previous status');
    assertJson((await agent.getSnapshot(first.snapshotId)).status, 'completed', 'unchanged');
    assertJson(await agent.abort('no-such-snapshot'), undefined, 'unknown');
    assertJson(await agent.getSnapshot('no-such-snapshot'), null, 'no snapshot');
  });

  await check('[spec: client-managed state across invocations; custom state streamed as customPatch chunk; artifacts streamed and deduplicated] a client-managed custom agent: the client carries the state, and its custom state and artifacts reach it', async () => {
    const tally = remoteAgent({ url: `${base}/agent/tally/genkit` });
    const chat = tally.chat();
    const first = await chat.send('one');
    assertJson(first.text, 'count: 1', 'text');
    assertJson(first.snapshotId, undefined, 'no snapshot: the client keeps the state');
    assertJson(first.state, { count: 1 }, 'custom state');
    const { stream, response } = chat.sendStream('two');
    response.catch(() => {}); // Awaited below; a failed stream rejects it too.
    const customs = [];
    const artifacts = [];
    for await (const chunk of stream) {
      if (chunk.custom !== undefined) customs.push(chunk.custom);
      if (chunk.raw?.artifact) artifacts.push(chunk.raw.artifact);
    }
    const second = await response;
    assertJson(customs, [{ count: 2 }], 'the customPatch chunk, applied');
    assertJson(artifacts, [{ name: 'tally', parts: [{ text: '2' }] }], 'the artifact chunk');
    assertJson(second.state, { count: 2 }, 'the state the client sent went on');
    assertJson(chat.artifacts, [{ name: 'tally', parts: [{ text: '2' }] }], 'one artifact by name');
    assertJson(chat.messages.map((m) => m.role), ['user', 'model', 'user', 'model'], 'roles');
  });

  await check('[spec: server-managed agent rejects init state] a client-managed state sent to this server-managed agent is refused', async () => {
    const chat = agent.chat({ state: { messages: [], custom: { x: 1 } } });
    const error = await rejects(chat.send('hi'), 'init state');
    assertJson(error.status, 'FAILED_PRECONDITION', 'status');
    assert(/Cannot send 'state'/.test(error.message), () => error.message);
  });

  await check('[spec: client-managed agent rejects sessionId] a session id sent to a client-managed agent is refused', async () => {
    const tally = remoteAgent({ url: `${base}/agent/tally/genkit` });
    const chat = tally.chat({ sessionId: '44444444-4444-4444-8444-444444444444' });
    const error = await rejects(chat.send('hi'), 'init sessionId');
    assertJson(error.status, 'FAILED_PRECONDITION', 'status');
    assert(/Cannot use 'sessionId'/.test(error.message), () => error.message);
  });

  await check('[spec: snapshotId with mismatched sessionId rejected] a snapshot of another session is refused', async () => {
    // A chat sends a snapshotId or a sessionId, never both: this is the transport remoteAgent
    // runs a turn with (streamFlow), and the status as its chat reads it from the error.
    const turn = streamFlow({
      url: `${base}/agent/echo/genkit`,
      input: { message: { role: 'user', content: [{ text: 'hi' }] } },
      init: { snapshotId: first.snapshotId, sessionId: '99999999-9999-4999-8999-999999999999' },
    });
    const error = await rejects(turn.output, 'a snapshot of another session');
    assertJson(/^([A-Z_]+):/.exec(error.message)?.[1], 'INVALID_ARGUMENT', 'status');
    assert(/does not belong to session/.test(error.message), () => error.message);
  });
});

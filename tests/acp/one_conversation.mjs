// The editor's side of the conversation `demo/tests/one_conversation.rs` holds with bidi-demo
// over every wire: the official ACP TypeScript SDK (@agentclientprotocol/sdk) as the client of
// `bidi-demo --acp`, on the SQLite file of a bidi-demo serving HTTP. The web client started chat
// <chatId> with "hello from the web"; here the editor loads it, prompts, a web turn comes in
// between (execute SSE, on the HTTP server, while the editor keeps the session open), and the
// editor prompts again. The assistant runs the demo model: it calls `word_count` on the
// message, then answers "Done: N words".
//
// Usage: node one_conversation.mjs <bidi-demo> <scratch-dir> <db> <chatId> <baseUrl>

import { spawn } from 'node:child_process';
import path from 'node:path';
import { Readable, Writable } from 'node:stream';
import * as acp from '@agentclientprotocol/sdk';
import { assert, assertJson, check, run } from './harness.mjs';

/** What the SDK logged with console.error (a message it rejected, a handler that threw). */
const sdkErrors = [];
const consoleError = console.error;
console.error = (...args) => {
  sdkErrors.push(args.map((a) => (typeof a === 'string' ? a : JSON.stringify(a))).join(' '));
  consoleError(...args);
};

/**
 * Lets the handlers of the notifications the agent sent before a response run: the SDK settles a
 * request's promise before it has run the (promise-job) handlers of every notification read before
 * the response, and a timer runs only once no promise job is left.
 */
const settle = () => new Promise((resolve) => setTimeout(resolve, 50));

/** The text of the updates of kind `kind`, joined. */
const text = (updates, kind) =>
  updates
    .filter((u) => u.update.sessionUpdate === kind && u.update.content.type === 'text')
    .map((u) => u.update.content.text)
    .join('');

/** Prompts `sessionId` with `said`: the demo model's answer must end the turn, telling the count. */
async function prompt(ctx, updates, sessionId, said) {
  const before = updates.length;
  const response = await ctx.request(acp.methods.agent.session.prompt, {
    sessionId,
    prompt: [{ type: 'text', text: said }],
  });
  await settle();
  assertJson(response.stopReason, 'end_turn', 'stopReason');
  const answer = text(updates.slice(before), 'agent_message_chunk');
  const words = said.split(/\s+/).length;
  assert(answer.endsWith(`Done: ${words} words`), () => `the answer: ${answer}`);
}

await run(async (demo, dir) => {
  const [db, sessionId, base] = process.argv.slice(4);
  const env = { ...process.env };
  delete env.OPENAI_BASE_URL;
  delete env.OPENAI_API_KEY;
  const child = spawn(demo, ['--acp', '--db', db, '--notes', path.join(dir, 'notes.txt')], {
    stdio: ['pipe', 'pipe', 'pipe'],
    env,
  });
  let stderr = '';
  child.stderr.on('data', (chunk) => {
    stderr += chunk;
  });
  const exited = new Promise((resolve) => child.on('exit', (code) => resolve(code)));
  await new Promise((resolve, reject) => {
    child.on('spawn', resolve);
    child.on('error', reject);
  });
  const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  const updates = [];
  const app = acp
    .client({ name: 'bidi-one-conversation', version: '0.0.0' })
    .onNotification(acp.methods.client.session.update, async ({ params }) => {
      updates.push(params);
    });

  await app.connectWith(stream, async (ctx) => {
    const loaded = await check('session/load replays what the web client said, and its answer', async () => {
      await ctx.request(acp.methods.agent.initialize, {
        protocolVersion: acp.PROTOCOL_VERSION,
        // As Zed does: the agent is offered the editor's files and terminals too, and still
        // counts the words of a message that names no tool.
        clientCapabilities: { fs: { readTextFile: true, writeTextFile: true }, terminal: true },
        clientInfo: { name: 'bidi-one-conversation', version: '0.0.0' },
      });
      await ctx.request(acp.methods.agent.session.load, { sessionId, cwd: dir, mcpServers: [] });
      await settle();
      assert(updates.every((u) => u.sessionId === sessionId), () => `another session: ${JSON.stringify(updates)}`);
      assertJson(text(updates, 'user_message_chunk'), 'hello from the web', 'the replayed user text');
      const answer = text(updates, 'agent_message_chunk');
      assert(answer.endsWith('Done: 4 words'), () => `the replayed answer: ${answer}`);
      const call = updates.find((u) => u.update.sessionUpdate === 'tool_call');
      assert(call?.update.title !== undefined, () => `no replayed tool call: ${JSON.stringify(updates)}`);
      return true;
    });
    if (!loaded) return;

    await check('the editor goes on with the conversation', async () => {
      await prompt(ctx, updates, sessionId, 'hello from the editor');
    });

    await check('a web turn on another wire while the editor keeps the session open', async () => {
      const response = await fetch(`${base}/agent/assistant/execute`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ sessionId, input: { content: 'the web again' } }),
      });
      const body = await response.text();
      assert(response.status === 200, () => `status ${response.status}: ${body}`);
      const complete = body.split('\n\n').filter((record) => record.startsWith('event: execute_complete'));
      assert(complete.length === 1, () => `no execute_complete: ${body}`);
      assert(complete[0].includes('"status":"completed"'), () => complete[0]);
    });

    await check("the editor's next turn keeps the web's", async () => {
      await prompt(ctx, updates, sessionId, 'the editor again');
    });

    await check('every session/update passed the SDK schema', async () => {
      assert(sdkErrors.length === 0, () => `the SDK logged: ${sdkErrors.join(' | ')}`);
    });
  });

  child.stdin.end();
  const timer = setTimeout(() => child.kill(), 10_000);
  const code = await exited;
  clearTimeout(timer);
  await check('bidi-demo --acp exits cleanly at the end of its input', async () => {
    assert(code === 0, () => `exit code ${code}; stderr:\n${stderr}`);
  });
});

// The official ACP TypeScript SDK (@agentclientprotocol/sdk) as the client of the acp-agent
// example: `node ts_client.mjs <agent-binary> <scratch-dir>`. The SDK parses every message the
// agent sends with its zod schemas; the checks below look at what the agent answered.

import { spawn } from 'node:child_process';
import path from 'node:path';
import { Readable, Writable } from 'node:stream';
import * as acp from '@agentclientprotocol/sdk';
import * as unstable from '@agentclientprotocol/sdk/unstable';
import { assert, assertJson, check, run } from './harness.mjs';

/** What the SDK logged with console.error (a message it rejected, a handler that threw). */
const sdkErrors = [];
const consoleError = console.error;
console.error = (...args) => {
  sdkErrors.push(args.map((a) => (typeof a === 'string' ? a : JSON.stringify(a))).join(' '));
  consoleError(...args);
};

/**
 * Starts the agent on the SQLite file `db`, connects the SDK's client to its stdio and runs
 * `op(ctx, updates)`, where `updates` collects the `session/update` notifications' params.
 * Closes the agent's stdin afterwards and waits for it to exit.
 */
async function withAgent(agent, db, op) {
  const child = spawn(agent, ['--db', db], { stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (chunk) => {
    stderr += chunk;
  });
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  const spawned = new Promise((resolve, reject) => {
    child.on('spawn', resolve);
    child.on('error', reject);
  });
  await spawned;
  // Count the session/update lines the agent writes, next to the SDK reading them.
  const sent = { updates: 0, partial: '' };
  child.stdout.on('data', (chunk) => {
    const lines = (sent.partial + chunk).split('\n');
    sent.partial = lines.pop();
    for (const line of lines) {
      try {
        if (JSON.parse(line).method === 'session/update') sent.updates += 1;
      } catch {
        // Not JSON: the SDK reports it.
      }
    }
  });
  const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  const updates = [];
  const app = acp
    .client({ name: 'bidi-ts-peer', version: '0.0.0' })
    .onNotification(acp.methods.client.session.update, async ({ params }) => {
      updates.push(params);
    })
    .onRequest(acp.methods.client.session.requestPermission, async ({ params }) => ({
      outcome: { outcome: 'selected', optionId: params.options[0].optionId },
    }));
  try {
    return await app.connectWith(stream, async (ctx) => {
      const value = await op(ctx, updates);
      await settle();
      await check('every session/update the agent sent passed the SDK schema and reached the client', async () => {
        assert(sent.updates > 0, 'no session/update sent');
        assert(updates.length === sent.updates, `${updates.length} of ${sent.updates} reached the client`);
        assert(sdkErrors.length === 0, () => `the SDK logged: ${sdkErrors.join(' | ')}`);
      });
      return value;
    });
  } finally {
    child.stdin.end();
    const timer = setTimeout(() => child.kill(), 10_000);
    const { code } = await exited;
    clearTimeout(timer);
    if (code !== 0) {
      console.log(`# the agent exited with ${code}; its stderr:\n# ${stderr.trim().replace(/\n/g, '\n# ')}`);
    }
  }
}

/**
 * Lets the handlers of the notifications the agent sent before a response run: the SDK settles a
 * request's promise before it has run the (promise-job) handlers of every notification read before
 * the response, and a timer runs only once no promise job is left.
 */
const settle = () => new Promise((resolve) => setTimeout(resolve, 50));

function initialize(ctx) {
  return ctx.request(acp.methods.agent.initialize, {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
    clientInfo: { name: 'bidi-ts-peer', version: '0.0.0' },
  });
}

/** The text of the `agent_message_chunk` updates, joined. */
function messageText(updates) {
  return updates
    .filter((u) => u.update.sessionUpdate === 'agent_message_chunk' && u.update.content.type === 'text')
    .map((u) => u.update.content.text)
    .join('');
}

/** The text of the `user_message_chunk` updates, joined. */
function userText(updates) {
  return updates
    .filter((u) => u.update.sessionUpdate === 'user_message_chunk' && u.update.content.type === 'text')
    .map((u) => u.update.content.text)
    .join('');
}

await run(async (agent, dir) => {
  const db = path.join(dir, 'ts-sessions.sqlite3');
  let sessionId;
  let firstAnswer = '';
  let secondAnswer = '';
  // The session whose model was chosen, and its fork.
  let forkSource;
  let forkId;

  await withAgent(agent, db, async (ctx, updates) => {
    const init = await check('initialize: protocol version 1 and the agent capabilities', async () => {
      const response = await initialize(ctx);
      assertJson(response.protocolVersion, 1, 'protocolVersion');
      assert(acp.PROTOCOL_VERSION === 1, `the SDK speaks ${acp.PROTOCOL_VERSION}`);
      assert(typeof response.agentCapabilities === 'object', () => `agentCapabilities: ${JSON.stringify(response)}`);
      assert(response.agentCapabilities.loadSession === true, () => `loadSession: ${JSON.stringify(response.agentCapabilities)}`);
      const prompts = response.agentCapabilities.promptCapabilities ?? {};
      assert(prompts.image === true && prompts.audio === true && prompts.embeddedContext === true,
        () => `promptCapabilities: ${JSON.stringify(prompts)}`);
      return response;
    });
    if (!init) return;

    const created = await check('session/new: a session id', async () => {
      const response = await ctx.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [] });
      assert(typeof response.sessionId === 'string' && response.sessionId.length > 0, () => JSON.stringify(response));
      return response;
    });
    if (!created) return;
    sessionId = created.sessionId;

    await check('session/prompt: agent_message_chunk updates, then end_turn', async () => {
      const response = await ctx.request(acp.methods.agent.session.prompt, {
        sessionId,
        prompt: [{ type: 'text', text: 'hello from the TypeScript SDK' }],
      });
      await settle();
      assertJson(response.stopReason, 'end_turn', 'stopReason');
      assert(updates.length > 0, 'no session/update');
      assert(updates.every((u) => u.sessionId === sessionId), () => `an update of another session: ${JSON.stringify(updates)}`);
      const kinds = new Set(updates.map((u) => u.update.sessionUpdate));
      assert(kinds.has('agent_message_chunk'), () => `no agent_message_chunk among ${[...kinds]}`);
      const commands = updates.find((u) => u.update.sessionUpdate === 'available_commands_update');
      assert(commands && commands.update.availableCommands.some((c) => c.name === 'save_note' && c.input?.hint),
        () => `no available_commands_update with /save_note: ${JSON.stringify(commands)}`);
      firstAnswer = messageText(updates);
      assert(firstAnswer.length > 0, 'the message chunks carry no text');
      // The demo model calls the agent's word_count tool: a tool_call, then its completion.
      const call = updates.find((u) => u.update.sessionUpdate === 'tool_call');
      assert(call, () => `no tool_call among ${[...kinds]}`);
      const done = updates.find(
        (u) => u.update.sessionUpdate === 'tool_call_update' && u.update.toolCallId === call.update.toolCallId,
      );
      assert(done && done.update.status === 'completed', () => `the tool call did not complete: ${JSON.stringify(done)}`);
    });

    await check('a second prompt in the same session ends end_turn with its own updates', async () => {
      const before = updates.length;
      const response = await ctx.request(acp.methods.agent.session.prompt, {
        sessionId,
        prompt: [
          { type: 'text', text: 'and a second prompt' },
          { type: 'image', mimeType: 'image/png', data: 'iVBORw0KGgo=' },
          { type: 'resource', resource: { uri: 'file:///tmp/a.txt', mimeType: 'text/plain', text: 'attached text' } },
        ],
      });
      await settle();
      assertJson(response.stopReason, 'end_turn', 'stopReason');
      const own = updates.slice(before);
      assert(own.some((u) => u.update.sessionUpdate === 'agent_message_chunk'), () => `no agent_message_chunk: ${JSON.stringify(own)}`);
      secondAnswer = messageText(own);
    });

    await check('a session/prompt with a bad param is answered -32602', async () => {
      let error;
      try {
        await ctx.request(acp.methods.agent.session.prompt, { sessionId, prompt: 'not a list of blocks' });
      } catch (e) {
        error = e;
      }
      assert(error !== undefined, 'the bad request succeeded');
      assertJson(error.code, -32602, `the error code (${error.message})`);
    });

    await check('an unknown method is answered -32601', async () => {
      let error;
      try {
        await ctx.request('bidi/no_such_method', {});
      } catch (e) {
        error = e;
      }
      assert(error !== undefined, 'the unknown method succeeded');
      assertJson(error.code, -32601, `the error code (${error.message})`);
    });

    await check('session/prompt of an unknown session is an error', async () => {
      let error;
      try {
        await ctx.request(acp.methods.agent.session.prompt, {
          sessionId: 'no-such-session',
          prompt: [{ type: 'text', text: 'hi' }],
        });
      } catch (e) {
        error = e;
      }
      assert(error !== undefined, 'the prompt succeeded');
      assert(typeof error.code === 'number', () => `not a JSON-RPC error: ${error}`);
    });
  });

  if (!sessionId) return;
  await withAgent(agent, db, async (ctx, updates) => {
    await check('session/load in a new agent process replays the conversation', async () => {
      await initialize(ctx);
      const response = await ctx.request(acp.methods.agent.session.load, { sessionId, cwd: dir, mcpServers: [] });
      await settle();
      assert(response !== undefined, 'no response');
      assert(updates.length > 0, 'nothing replayed');
      assert(updates.every((u) => u.sessionId === sessionId), () => `an update of another session: ${JSON.stringify(updates)}`);
      const users = userText(updates);
      assert(users.includes('hello from the TypeScript SDK'), () => `the first prompt is not replayed: ${users}`);
      assert(users.includes('and a second prompt'), () => `the second prompt is not replayed: ${users}`);
      const blocks = updates.filter((u) => u.update.sessionUpdate === 'user_message_chunk').map((u) => u.update.content);
      assert(blocks.some((b) => b.type === 'image' && b.data === 'iVBORw0KGgo=' && b.mimeType === 'image/png'),
        () => `the image is not replayed: ${JSON.stringify(blocks)}`);
      assert(blocks.some((b) => b.type === 'resource' && b.resource.text === 'attached text'),
        () => `the embedded resource is not replayed: ${JSON.stringify(blocks)}`);
      const agents = messageText(updates);
      assert(agents.includes(firstAnswer) && agents.includes(secondAnswer), () => `the answers are not replayed: ${agents}`);
    });

    await check('the loaded session takes a new prompt', async () => {
      const response = await ctx.request(acp.methods.agent.session.prompt, {
        sessionId,
        prompt: [{ type: 'text', text: 'after the restart' }],
      });
      assertJson(response.stopReason, 'end_turn', 'stopReason');
    });

    await check('session/list, session/status and session/set_title see the stored sessions', async () => {
      const listed = await ctx.request(acp.methods.agent.session.list, {});
      const own = listed.sessions.find((s) => s.sessionId === sessionId);
      assert(own, () => `the session is not listed: ${JSON.stringify(listed)}`);
      assert(typeof own.updatedAt === 'string', () => `no updatedAt: ${JSON.stringify(own)}`);
      const status = await ctx.request(unstable.methods.agent.session.status, { sessionId });
      assertJson(status.status, 'open', 'status of the loaded session');
      const titled = await ctx.request(unstable.methods.agent.session.setTitle, { sessionId, title: ' The  TS session ' });
      assertJson(titled.title, 'The TS session', 'the title kept');
      await settle();
      const info = updates.find((u) => u.update.sessionUpdate === 'session_info_update');
      assert(info && info.update.title === 'The TS session', () => `no session_info_update: ${JSON.stringify(info)}`);
      const again = await ctx.request(acp.methods.agent.session.list, { cwd: dir });
      const titledOwn = again.sessions.find((s) => s.sessionId === sessionId);
      assert(titledOwn && titledOwn.title === 'The TS session', () => `the title is not listed: ${JSON.stringify(again)}`);
    });
  });

  await withAgent(agent, db, async (ctx, updates) => {
    await check('session/resume in a new agent process replays nothing and goes on', async () => {
      await initialize(ctx);
      const status = await ctx.request(unstable.methods.agent.session.status, { sessionId });
      assertJson(status.status, 'saved', 'status before the resume');
      await ctx.request(acp.methods.agent.session.resume, { sessionId, cwd: dir, mcpServers: [] });
      await settle();
      assert(!updates.some((u) => u.update.sessionUpdate === 'user_message_chunk'), () => `a replay: ${JSON.stringify(updates)}`);
      const response = await ctx.request(acp.methods.agent.session.prompt, {
        sessionId,
        prompt: [{ type: 'text', text: 'after the resume' }],
      });
      assertJson(response.stopReason, 'end_turn', 'stopReason');
    });

    await check('session/new offers the model option, and session/set_config_option chooses the model that answers', async () => {
      const created = await ctx.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [] });
      const model = (created.configOptions ?? []).find((option) => option.id === 'model');
      assert(model && model.type === 'select' && model.category === 'model', () => JSON.stringify(created));
      assertJson(model.currentValue, 'demo', 'the agent\'s own model first');
      assertJson(model.options.map((option) => option.value), ['demo', 'demo-loud'], 'the models offered');
      const chosen = await ctx.request(acp.methods.agent.session.setConfigOption, {
        sessionId: created.sessionId,
        configId: 'model',
        value: 'demo-loud',
      });
      assertJson(chosen.configOptions[0].currentValue, 'demo-loud', 'the option as set');
      await settle();
      const told = updates.find((u) => u.update.sessionUpdate === 'config_option_update');
      assert(told && told.update.configOptions[0].currentValue === 'demo-loud', () => `no config_option_update: ${JSON.stringify(told)}`);
      const before = updates.length;
      await ctx.request(acp.methods.agent.session.prompt, {
        sessionId: created.sessionId,
        prompt: [{ type: 'text', text: 'count these words' }],
      });
      const said = messageText(updates.slice(before));
      assert(said.length > 0 && said === said.toUpperCase(), () => `not the loud model: ${said}`);
      let error;
      try {
        await ctx.request(acp.methods.agent.session.setConfigOption, {
          sessionId: created.sessionId,
          configId: 'model',
          value: 'gpt-9',
        });
      } catch (e) {
        error = e;
      }
      assertJson(error?.code, -32602, `an unknown model (${error?.message})`);
      forkSource = created.sessionId;
    });

    await check('session/fork: a new session with the conversation so far, each going its own way', async () => {
      const forked = await ctx.request(unstable.methods.agent.session.fork, {
        sessionId: forkSource,
        cwd: dir,
        mcpServers: [],
      });
      assert(typeof forked.sessionId === 'string' && forked.sessionId !== forkSource, () => JSON.stringify(forked));
      assertJson(forked.configOptions?.[0]?.currentValue, 'demo-loud', 'the fork keeps the model chosen');
      await ctx.request(acp.methods.agent.session.prompt, {
        sessionId: forked.sessionId,
        prompt: [{ type: 'text', text: 'only on the fork' }],
      });
      forkId = forked.sessionId;
    });

    await check('session/delete removes the session for good', async () => {
      await ctx.request(acp.methods.agent.session.delete, { sessionId });
      const listed = await ctx.request(acp.methods.agent.session.list, {});
      assert(!listed.sessions.some((s) => s.sessionId === sessionId), () => `still listed: ${JSON.stringify(listed)}`);
      let error;
      try {
        await ctx.request(acp.methods.agent.session.load, { sessionId, cwd: dir, mcpServers: [] });
      } catch (e) {
        error = e;
      }
      assert(error !== undefined, 'the deleted session loaded');
      assertJson(error.code, -32002, `the error code (${error.message})`);
    });
  });

  await withAgent(agent, db, async (ctx, updates) => {
    await check('a fork and its source, loaded in a new agent process, each replay their own conversation', async () => {
      await initialize(ctx);
      await ctx.request(acp.methods.agent.session.load, { sessionId: forkSource, cwd: dir, mcpServers: [] });
      await settle();
      const source = userText(updates.filter((u) => u.sessionId === forkSource));
      assertJson(source, 'count these words', 'the source replays its own prompt only');
      await ctx.request(acp.methods.agent.session.load, { sessionId: forkId, cwd: dir, mcpServers: [] });
      await settle();
      const fork = userText(updates.filter((u) => u.sessionId === forkId));
      assertJson(fork, 'count these wordsonly on the fork', 'the fork replays both');
    });
  });
});

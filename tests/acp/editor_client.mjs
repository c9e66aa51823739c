// The official ACP TypeScript SDK (@agentclientprotocol/sdk) as an editor that offers its files
// and terminals to the acp-agent example: `node editor_client.mjs <agent-binary> <scratch-dir>`.
// The client implements fs/read_text_file (from its open buffers first, as an editor with
// unsaved changes does, else from disk), fs/write_text_file (to disk) and terminal/* (real
// processes), and answers permission requests as the check in progress says. The demo model
// calls the tool a prompt names, with the JSON object that follows the name as its arguments.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { Readable, Writable } from 'node:stream';
import * as acp from '@agentclientprotocol/sdk';
import { assert, assertJson, check, run } from './harness.mjs';

/** The editor's state: its unsaved buffers, its terminals, the requests the agent made. */
const editor = {
  buffers: new Map(),
  terminals: new Map(),
  requests: [],
  /** `allow` or `reject`: what the user answers to a permission request. */
  answer: 'allow',
};

/** Waits until `condition()` holds, checking every 20 ms. */
async function until(condition, what) {
  for (let i = 0; i < 1500; i += 1) {
    if (condition()) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`never: ${what}`);
}

/** A terminal: a real process, its output (the last `limit` bytes) and its exit. */
function createTerminal({ command, args = [], cwd, outputByteLimit }) {
  const child = spawn(command, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
  const terminal = { child, output: '', truncated: false, exit: undefined, released: false };
  const append = (chunk) => {
    terminal.output += chunk;
    if (outputByteLimit && Buffer.byteLength(terminal.output) > outputByteLimit) {
      terminal.output = terminal.output.slice(-outputByteLimit);
      terminal.truncated = true;
    }
  };
  child.stdout.on('data', append);
  child.stderr.on('data', append);
  terminal.exited = new Promise((resolve) => {
    child.on('close', (code, signal) => {
      terminal.exit = { exitCode: code, signal };
      resolve(terminal.exit);
    });
    child.on('error', (error) => {
      append(String(error));
      terminal.exit = { exitCode: 127, signal: null };
      resolve(terminal.exit);
    });
  });
  return terminal;
}

function terminalOf(params) {
  const terminal = editor.terminals.get(params.terminalId);
  if (!terminal) throw acp.RequestError.invalidParams(undefined, `no terminal ${params.terminalId}`);
  return terminal;
}

/** Starts the agent and connects the SDK's client, an editor, to it; runs `op(ctx, updates)`. */
async function withAgent(agent, db, op) {
  const child = spawn(agent, ['--db', db], { stdio: ['pipe', 'pipe', 'inherit'] });
  await new Promise((resolve, reject) => {
    child.on('spawn', resolve);
    child.on('error', reject);
  });
  const exited = new Promise((resolve) => child.on('exit', resolve));
  const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  const updates = [];
  const seen = (method, params) => editor.requests.push({ method, params });
  const app = acp
    .client({ name: 'bidi-ts-editor', version: '0.0.0' })
    .onNotification(acp.methods.client.session.update, async ({ params }) => {
      updates.push(params);
    })
    .onRequest(acp.methods.client.session.requestPermission, async ({ params }) => {
      seen('session/request_permission', params);
      const kind = editor.answer === 'allow' ? 'allow_once' : 'reject_once';
      const option = params.options.find((o) => o.kind === kind);
      return { outcome: { outcome: 'selected', optionId: option.optionId } };
    })
    .onRequest(acp.methods.client.fs.readTextFile, async ({ params }) => {
      seen('fs/read_text_file', params);
      const text = editor.buffers.get(params.path) ?? fs.readFileSync(params.path, 'utf8');
      const lines = text.split('\n');
      const from = (params.line ?? 1) - 1;
      const to = params.limit ? from + params.limit : lines.length;
      return { content: lines.slice(from, to).join('\n') };
    })
    .onRequest(acp.methods.client.fs.writeTextFile, async ({ params }) => {
      seen('fs/write_text_file', params);
      fs.writeFileSync(params.path, params.content);
      editor.buffers.delete(params.path);
      return {};
    })
    .onRequest(acp.methods.client.terminal.create, async ({ params }) => {
      seen('terminal/create', params);
      const terminalId = `term-${editor.terminals.size + 1}`;
      editor.terminals.set(terminalId, createTerminal(params));
      return { terminalId };
    })
    .onRequest(acp.methods.client.terminal.output, async ({ params }) => {
      seen('terminal/output', params);
      const t = terminalOf(params);
      return { output: t.output, truncated: t.truncated, exitStatus: t.exit ?? null };
    })
    .onRequest(acp.methods.client.terminal.waitForExit, async ({ params }) => {
      seen('terminal/wait_for_exit', params);
      return terminalOf(params).exited;
    })
    .onRequest(acp.methods.client.terminal.kill, async ({ params }) => {
      seen('terminal/kill', params);
      terminalOf(params).child.kill('SIGTERM');
      return {};
    })
    .onRequest(acp.methods.client.terminal.release, async ({ params }) => {
      seen('terminal/release', params);
      const t = terminalOf(params);
      t.child.kill('SIGKILL');
      t.released = true;
      return {};
    });
  try {
    return await app.connectWith(stream, (ctx) => op(ctx, updates));
  } finally {
    child.stdin.end();
    await exited;
  }
}

/** The requests of `method` the agent made since `from`. */
const requested = (method, from) => editor.requests.slice(from).filter((r) => r.method === method);

/** The last update of the session's first tool call since `from`, and the call. */
function toolCall(updates, from) {
  const own = updates.slice(from).map((u) => u.update);
  const call = own.find((u) => u.sessionUpdate === 'tool_call');
  assert(call, () => `no tool_call: ${JSON.stringify(own)}`);
  const last = own.filter((u) => u.toolCallId === call.toolCallId).pop();
  return { call, last, own };
}

await run(async (agent, dir) => {
  const project = path.join(dir, 'project');
  fs.mkdirSync(project, { recursive: true });
  const db = path.join(dir, 'editor-sessions.sqlite3');

  await withAgent(agent, db, async (ctx, updates) => {
    const prompt = (sessionId, text) =>
      ctx.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: 'text', text }] });
    await ctx.request(acp.methods.agent.initialize, {
      protocolVersion: acp.PROTOCOL_VERSION,
      clientCapabilities: { fs: { readTextFile: true, writeTextFile: true }, terminal: true },
      clientInfo: { name: 'bidi-ts-editor', version: '0.0.0' },
    });
    const { sessionId } = await ctx.request(acp.methods.agent.session.new, { cwd: project, mcpServers: [] });

    await check('a read goes through the editor: its unsaved buffer, not the disk', async () => {
      const file = path.join(project, 'draft.md');
      fs.writeFileSync(file, 'on disk\n');
      editor.buffers.set(file, 'unsaved buffer text\n');
      const from = editor.requests.length;
      const before = updates.length;
      const response = await prompt(sessionId, 'read_text_file {"path": "draft.md"}');
      assertJson(response.stopReason, 'end_turn', 'stopReason');
      assertJson(requested('fs/read_text_file', from).map((r) => r.params.path), [file], 'fs/read_text_file');
      assertJson(requested('session/request_permission', from).length, 0, 'permission requests for a read');
      const { call, last } = toolCall(updates, before);
      assertJson(call.kind, 'read', 'the kind');
      assertJson(call.locations, [{ path: file }], 'the locations');
      assertJson(last.status, 'completed', 'the status');
      const said = updates.slice(before).filter((u) => u.update.sessionUpdate === 'agent_message_chunk')
        .map((u) => u.update.content.text).join('');
      assert(said.includes('unsaved buffer text'), () => `the agent did not read the buffer: ${said}`);
    });

    await check('an allowed write lands through fs/write_text_file, shown as a diff', async () => {
      const file = path.join(project, 'hello.txt');
      fs.writeFileSync(file, 'old text\n');
      editor.answer = 'allow';
      const from = editor.requests.length;
      const before = updates.length;
      const response = await prompt(sessionId, 'write_text_file {"path": "hello.txt", "content": "written through the editor\\n"}');
      assertJson(response.stopReason, 'end_turn', 'stopReason');
      const methods = editor.requests.slice(from).map((r) => r.method);
      assertJson(methods, ['session/request_permission', 'fs/read_text_file', 'fs/write_text_file'], 'the requests');
      assertJson(fs.readFileSync(file, 'utf8'), 'written through the editor\n', 'the file');
      const { call, last } = toolCall(updates, before);
      assertJson(call.kind, 'edit', 'the kind');
      assertJson(last.status, 'completed', 'the status');
      const diff = last.content.find((c) => c.type === 'diff');
      assert(diff, () => `no diff: ${JSON.stringify(last.content)}`);
      assertJson([diff.path, diff.oldText, diff.newText], [file, 'old text\n', 'written through the editor\n'], 'the diff');
    });

    await check('an allowed command runs in an editor terminal, embedded in the call', async () => {
      editor.answer = 'allow';
      const from = editor.requests.length;
      const before = updates.length;
      const response = await prompt(sessionId,
        'run_command {"command": "sh", "args": ["-c", "echo from-the-terminal; pwd"]}');
      assertJson(response.stopReason, 'end_turn', 'stopReason');
      const methods = editor.requests.slice(from).map((r) => r.method);
      assertJson(methods.filter((m) => m.startsWith('terminal/')),
        ['terminal/create', 'terminal/wait_for_exit', 'terminal/output', 'terminal/release'], 'the terminal requests');
      const [create] = requested('terminal/create', from);
      assertJson([create.params.command, create.params.args, create.params.cwd], ['sh', ['-c', 'echo from-the-terminal; pwd'], project], 'terminal/create');
      const { call, last } = toolCall(updates, before);
      assertJson(call.kind, 'execute', 'the kind');
      assertJson(last.status, 'completed', 'the status');
      assert(last.content.some((c) => c.type === 'terminal' && c.terminalId === 'term-1'), () => `no terminal: ${JSON.stringify(last.content)}`);
      const text = last.content.filter((c) => c.type === 'content').map((c) => c.content.text).join('');
      assert(text.includes('from-the-terminal') && text.includes(project) && text.includes('exited with code 0'),
        () => `the output: ${text}`);
    });

    await check('a rejected write and a rejected command never reach the editor', async () => {
      editor.answer = 'reject';
      const from = editor.requests.length;
      const file = path.join(project, 'rejected.txt');
      const before = updates.length;
      const wrote = await prompt(sessionId, 'write_text_file {"path": "rejected.txt", "content": "no"}');
      assertJson(wrote.stopReason, 'end_turn', 'stopReason');
      assertJson(toolCall(updates, before).last.status, 'failed', 'the write status');
      const between = updates.length;
      const ran = await prompt(sessionId, 'run_command {"command": "touch", "args": ["ran.txt"]}');
      assertJson(ran.stopReason, 'end_turn', 'stopReason');
      assertJson(toolCall(updates, between).last.status, 'failed', 'the command status');
      const methods = editor.requests.slice(from).map((r) => r.method);
      assertJson(methods, ['session/request_permission', 'session/request_permission'], 'the requests');
      assert(!fs.existsSync(file), 'the rejected write happened');
      assert(!fs.existsSync(path.join(project, 'ran.txt')), 'the rejected command ran');
    });

    await check('a cancelled turn kills its command and releases the terminal', async () => {
      editor.answer = 'allow';
      const from = editor.requests.length;
      const turn = prompt(sessionId, 'run_command {"command": "sleep", "args": ["60"]}');
      await until(() => requested('terminal/wait_for_exit', from).length > 0, 'the agent waits for the command');
      const [create] = requested('terminal/create', from);
      assert(create, 'no terminal/create');
      const terminal = editor.terminals.get(`term-${editor.terminals.size}`);
      await ctx.notify(acp.methods.agent.session.cancel, { sessionId });
      const response = await turn;
      assertJson(response.stopReason, 'cancelled', 'stopReason');
      await until(() => requested('terminal/release', from).length > 0, 'the terminal is released');
      const methods = editor.requests.slice(from).map((r) => r.method).filter((m) => m.startsWith('terminal/'));
      assertJson(methods, ['terminal/create', 'terminal/wait_for_exit', 'terminal/kill', 'terminal/release'], 'the terminal requests');
      const exit = await terminal.exited;
      assertJson(exit.signal, 'SIGTERM', 'how sleep ended');
    });
  });
});

// acpx (a third-party ACP client CLI) runs one prompt against the acp-agent example:
// `node acpx_check.mjs <agent-binary> <scratch-dir>`. It runs
// `acpx --agent <bin> --cwd <dir> --approve-all --format json exec "hello from acpx"` with HOME
// set to a fresh directory, then checks its exit code and the JSON-RPC transcript it prints.
// Then, as an editor that offers its files and terminals (acpx advertises `fs` and `terminal`),
// it has the agent write a file through `fs/write_text_file` and run a command through
// `terminal/create`, and, with `--deny-all`, checks that a refused write never happens.

import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { assert, assertJson, check, run } from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const cli = path.join(here, 'node_modules', 'acpx', 'dist', 'cli.js');

/** Runs acpx to its end; resolves with its exit code and output. */
function acpx(agent, dir, prompt = 'hello from acpx', permissions = '--approve-all', cwd = dir) {
  const home = mkdtempSync(path.join(dir, 'acpx-home-'));
  const args = [cli, '--agent', agent, '--cwd', cwd, permissions, '--format', 'json', 'exec', prompt];
  const child = spawn(process.execPath, args, {
    // The agent inherits acpx's environment: its sessions go to a file of the scratch directory.
    env: { ...process.env, HOME: home, BIDI_ACP_DB: path.join(dir, 'acpx-sessions.sqlite3') },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk) => {
    stdout += chunk;
  });
  child.stderr.on('data', (chunk) => {
    stderr += chunk;
  });
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
}

await run(async (agent, dir) => {
  const result = await check('acpx exec exits 0', async () => {
    const result = await acpx(agent, dir);
    assert(result.code === 0, () => `exit ${result.code ?? result.signal}; stderr: ${result.stderr.trim()}`);
    return result;
  });
  if (!result) return;

  const messages = await check('every line of the transcript is a JSON-RPC 2.0 message', async () => {
    const lines = result.stdout.split('\n').filter((line) => line.trim() !== '');
    assert(lines.length > 0, 'no transcript on stdout');
    return lines.map((line, i) => {
      let message;
      try {
        message = JSON.parse(line);
      } catch (error) {
        throw new Error(`line ${i + 1} is not JSON: ${line}`);
      }
      assertJson(message.jsonrpc, '2.0', `line ${i + 1}'s jsonrpc`);
      return message;
    });
  });
  if (!messages) return;

  /** The response to the request `method`, which must be in the transcript. */
  const answer = (method) => {
    const request = messages.find((m) => m.method === method && m.id !== undefined);
    assert(request, `no ${method} request`);
    const response = messages.find((m) => m.id === request.id && m.method === undefined);
    assert(response, `no response to ${method}`);
    assert(response.error === undefined, () => `${method} failed: ${JSON.stringify(response.error)}`);
    return response.result;
  };

  await check('initialize is answered with protocol version 1', async () => {
    assertJson(answer('initialize').protocolVersion, 1, 'protocolVersion');
  });

  let sessionId;
  await check('session/new is answered with a session id', async () => {
    sessionId = answer('session/new').sessionId;
    assert(typeof sessionId === 'string' && sessionId.length > 0, `sessionId ${sessionId}`);
  });

  await check('session/prompt streams agent_message_chunk updates of its session', async () => {
    const updates = messages.filter((m) => m.method === 'session/update');
    const chunks = updates.filter((m) => m.params.update.sessionUpdate === 'agent_message_chunk');
    assert(chunks.length > 0, () => `no agent_message_chunk among ${updates.map((m) => m.params.update.sessionUpdate)}`);
    assert(updates.every((m) => m.params.sessionId === sessionId), 'an update of another session');
    const text = chunks.map((m) => m.params.update.content.text).join('');
    assert(text.length > 0, 'the chunks carry no text');
  });

  await check('session/prompt ends with stopReason end_turn, the last response', async () => {
    assertJson(answer('session/prompt').stopReason, 'end_turn', 'stopReason');
    const responses = messages.filter((m) => m.method === undefined && (m.result !== undefined || m.error !== undefined));
    assertJson(responses.at(-1).result?.stopReason, 'end_turn', 'the last response');
  });

  const project = path.join(dir, 'project');
  mkdirSync(project, { recursive: true });
  /** The methods of the requests the agent sent acpx, in a run's transcript. */
  const requests = (result) => result.stdout.split('\n').filter((line) => line.trim() !== '')
    .map((line) => JSON.parse(line))
    .filter((m) => m.id !== undefined && typeof m.method === 'string')
    .map((m) => m.method);

  await check('an allowed write lands through acpx\'s fs/write_text_file', async () => {
    const prompt = 'write_text_file {"path": "from-acpx.txt", "content": "written through acpx\\n"}';
    const result = await acpx(agent, dir, prompt, '--approve-all', project);
    assert(result.code === 0, () => `exit ${result.code ?? result.signal}; stderr: ${result.stderr.trim()}`);
    assert(requests(result).includes('fs/write_text_file'), () => `no fs/write_text_file: ${requests(result)}`);
    const file = path.join(project, 'from-acpx.txt');
    assert(existsSync(file), 'the file was not written');
    assertJson(readFileSync(file, 'utf8'), 'written through acpx\n', 'the file');
  });

  await check('an allowed command runs in acpx\'s terminal/create', async () => {
    const prompt = 'run_command {"command": "sh", "args": ["-c", "echo ran > ran-by-acpx.txt"]}';
    const result = await acpx(agent, dir, prompt, '--approve-all', project);
    assert(result.code === 0, () => `exit ${result.code ?? result.signal}; stderr: ${result.stderr.trim()}`);
    const methods = requests(result);
    assert(methods.includes('terminal/create') && methods.includes('terminal/release'), () => `the requests: ${methods}`);
    assertJson(readFileSync(path.join(project, 'ran-by-acpx.txt'), 'utf8'), 'ran\n', 'what the command wrote');
  });

  await check('with --deny-all, the write is refused and never reaches acpx', async () => {
    const prompt = 'write_text_file {"path": "denied.txt", "content": "no"}';
    const result = await acpx(agent, dir, prompt, '--deny-all', project);
    const methods = requests(result);
    assert(methods.includes('session/request_permission'), () => `not asked: ${methods}`);
    assert(!methods.includes('fs/write_text_file'), () => `written anyway: ${methods}`);
    assert(!existsSync(path.join(project, 'denied.txt')), 'the file exists');
  });
});

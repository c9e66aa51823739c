// The MCP TypeScript SDK's Client against bidi's MCP server (tests/src/bin/mcp-server.rs),
// over stdio (the script starts `$MCP_SERVER_BIN stdio` itself) and over streamable HTTP (the
// URL on the command line). Each transport: tools listed with their input and output schemas
// (the SDK validates each result's structuredContent against its tool's outputSchema), a streaming flow
// called with a progress token, an agent called twice in one session, a slow flow cancelled
// (the server records the cancel's cause in `$MCP_MARKER_DIR/{transport}`, which the script
// waits for), and bad arguments answered with -32602 naming the argument. The agent `bank`
// calls a tool that needs approval: this client (without elicitation) reads what waits in the
// result and answers with a second call carrying `approvals`; a second client, with an
// elicitation handler, is asked, and approves, denies, declines, or cancels the call while
// asked. The agent `atlas` has no model of its own: a third client lends its model through
// sampling (with tools), and is asked with the conversation and the agent's tool; a client that
// does not sample gets an error saying so. `count`'s log record arrives as a
// `notifications/message` at the level the client set. An agent's sessions are resources,
// read and subscribed to.

import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  LoggingMessageNotificationSchema,
  McpError,
  ResourceUpdatedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

import { assert, assertJson, check, describe, run } from '../node/harness.mjs';

/** What the SDK's JSON Schema validator (Ajv) warned about: a format it does not know, say. */
const validatorWarnings = [];
const consoleWarn = console.warn;
console.warn = (...args) => {
  const text = args.map(String).join(' ');
  if (/unknown format|strict mode|schema/i.test(text)) validatorWarnings.push(text);
  consoleWarn(...args);
};

const bin = process.env.MCP_SERVER_BIN;
const markers = process.env.MCP_MARKER_DIR;

/** The MCP error a promise rejects with. */
async function mcpError(promise) {
  try {
    const result = await promise;
    throw new Error(`expected an error, got ${JSON.stringify(result)}`);
  } catch (error) {
    if (error?.code === undefined) throw error;
    return error;
  }
}

async function checks(transportName, client) {
  await check(`${transportName}: tools/list lists the flows and the agent with schemas`, async () => {
    const { tools } = await client.listTools();
    const byName = Object.fromEntries(tools.map((tool) => [tool.name, tool]));
    assertJson(Object.keys(byName).sort(), ['atlas', 'bank', 'chat', 'count', 'greet', 'slow'], 'tool names');
    assert(byName.count.description === 'Counts up to a number', 'count has its description');
    assert(byName.count.inputSchema.properties.upTo, () => `count's schema: ${JSON.stringify(byName.count.inputSchema)}`);
    const greet = byName.greet.inputSchema;
    assert(greet.properties.input?.type === 'string', () => `greet's input: ${JSON.stringify(greet)}`);
    assert(greet.properties.init, () => `greet's init: ${JSON.stringify(greet)}`);
    assert(byName.slow.inputSchema.properties.input, 'slow takes a wrapped input');
    assert(byName.chat.inputSchema.properties.message?.type === 'string', 'chat takes a message');
    assert(byName.chat.inputSchema.properties.approvals?.type === 'array', 'and approvals');
  });

  await check(`${transportName}: object outputs have an outputSchema, which the SDK validates with`, async () => {
    const { tools } = await client.listTools();
    const byName = Object.fromEntries(tools.map((tool) => [tool.name, tool]));
    const count = byName.count.outputSchema;
    assert(count?.type === 'object', () => `count's output schema: ${JSON.stringify(count)}`);
    assertJson(count.required?.slice().sort(), ['parity', 'total'], "count's required fields");
    assert(count.properties.parity?.$ref?.startsWith('#/$defs/'), () => `parity by $ref: ${JSON.stringify(count)}`);
    const chat = byName.chat.outputSchema;
    assertJson(chat?.required, ['text', 'sessionId'], "chat's output: the answer and its session");
    assert(byName.greet.outputSchema === undefined, 'a string output has no outputSchema');
    assert(byName.slow.outputSchema === undefined, 'nor has slow');
    // The validators the SDK compiled from them, used on every callTool of these tools.
    const counted = client.getToolOutputValidator('count');
    const chatted = client.getToolOutputValidator('chat');
    // Rust's integer formats (`uint32`) are no JSON Schema formats: a strict validator refuses
    // them, Ajv warns. The schemas carry none.
    assert(!JSON.stringify(tools).includes('"format":"uint'), () => `a Rust format: ${JSON.stringify(tools)}`);
    assertJson(validatorWarnings, [], 'the validator\'s warnings');
    assert(typeof counted === 'function' && typeof chatted === 'function', 'validators for count and chat');
    assert(client.getToolOutputValidator('greet') === undefined, 'no validator for greet');
    assert(counted({ total: 3, parity: 'odd' }).valid, 'a total validates');
    assert(!counted({ total: 3, parity: 'three' }).valid, 'a parity outside its $defs enum does not');
    assert(!counted({ total: 3 }).valid, 'nor does a total without its parity');
    assert(!chatted({ text: 'hi' }).valid, 'nor an answer without its sessionId');
  });

  await check(`${transportName}: a flow's chunks arrive as progress, then its output`, async () => {
    const { result, notified, progress } = await watched(client, { name: 'count', arguments: { upTo: 3 } });
    assertJson(notified.map((n) => n.params.message), ['1', '2', '3'], 'progress messages before the result');
    assertJson(notified.map((n) => n.params.progress), [1, 2, 3], 'progress counts');
    assert(progress.every((p, i) => p.message === String(i + 1)), () => `onprogress: ${JSON.stringify(progress)}`);
    assert(!result.isError, () => `not an error: ${JSON.stringify(result)}`);
    assertJson(result.structuredContent, { total: 3, parity: 'odd' }, 'structured output');
    assertJson(result.content, [{ type: 'text', text: '{"total":3,"parity":"odd"}' }], 'text output');
  });

  await check(`${transportName}: a flow's log records arrive as notifications/message, at or above the level set`, async () => {
    // The session's records come on its own stream (the GET), in order, but in no order with
    // the answers of the calls: an earlier check's record (countingTo 3) may still be on its
    // way. This check's calls count to numbers no other check counts to.
    const records = [];
    const ours = (n) => [2, 4].includes(n.params.data?.countingTo);
    client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => ours(n) && records.push(n.params));
    try {
      await client.setLoggingLevel('warning');
      await client.callTool({ name: 'count', arguments: { upTo: 2 } });
      await client.setLoggingLevel('info');
      await client.callTool({ name: 'count', arguments: { upTo: 4 } });
      const deadline = Date.now() + 60_000;
      while (records.length === 0 && Date.now() < deadline) await sleep(20);
      // A session's records go out in order: one below the level would have come first.
      assertJson(records, [{ level: 'info', logger: 'count', data: { countingTo: 4 } }], 'the record at info');
    } finally {
      client.removeNotificationHandler('notifications/message');
    }
  });

  await check(`${transportName}: an agent with no model of its own tells a client that lends none`, async () => {
    const result = await client.callTool({ name: 'atlas', arguments: { message: 'Capital of France?' } });
    assert(result.isError === true, () => JSON.stringify(result));
    assert(result.content[0].text.includes('no model of its own'), () => result.content[0].text);
  });

  await check(`${transportName}: a flow with an init takes it as an argument`, async () => {
    const result = await client.callTool({ name: 'greet', arguments: { input: 'Ada', init: { greeting: 'Hi' } } });
    assertJson(result.content, [{ type: 'text', text: 'Hi, Ada' }], 'a string output is its text, without JSON quotes');
    assert(result.structuredContent === undefined, 'a string output has no structured content');
  });

  await check(`${transportName}: a failing flow is a tool error with its message`, async () => {
    const result = await client.callTool({ name: 'count', arguments: { upTo: 5000 } });
    assert(result.isError === true, () => `an error result: ${JSON.stringify(result)}`);
    assert(result.content[0].text.includes('counting past 1000 takes too long'), () => result.content[0].text);
  });

  await check(`${transportName}: an agent goes on with its session`, async () => {
    const { result: first, notified } = await watched(client, { name: 'chat', arguments: { message: 'hello there' } });
    assert(!first.isError, () => JSON.stringify(first));
    assert(first.content[0].text === 'You said: hello there', () => first.content[0].text);
    const deltas = notified.map((n) => n.params.message);
    assert(deltas.join('') === 'You said: hello there', () => `deltas: ${JSON.stringify(deltas)}`);
    const { sessionId } = first.structuredContent;
    assert(typeof sessionId === 'string' && sessionId.length > 0, 'a sessionId');
    const second = await client.callTool({ name: 'chat', arguments: { message: 'again', sessionId } });
    assertJson(second.structuredContent, { text: 'You said: again (before: hello there)', sessionId }, 'second answer');
  });

  await check(`${transportName}: an agent's sessions are resources: listed, read, templated`, async () => {
    const first = await client.callTool({ name: 'chat', arguments: { message: 'remember me' } });
    const { sessionId } = first.structuredContent;
    const uri = `bidi://agent/chat/session/${sessionId}`;
    const listed = [];
    let cursor;
    do {
      const page = await client.listResources(cursor ? { cursor } : {});
      listed.push(...page.resources);
      cursor = page.nextCursor;
    } while (cursor);
    const own = listed.find((resource) => resource.uri === uri);
    assert(own && own.mimeType === 'application/json', () => `not listed: ${JSON.stringify(listed)}`);
    const read = await client.readResource({ uri });
    assertJson(read.contents.length, 1, 'one content');
    assertJson(read.contents[0].uri, uri, 'its uri');
    const messages = JSON.parse(read.contents[0].text);
    assertJson(messages[0], { role: 'user', content: 'remember me' }, 'the conversation');
    assert(messages[1].role === 'assistant', () => JSON.stringify(messages));
    const { resourceTemplates } = await client.listResourceTemplates();
    assertJson(resourceTemplates.map((t) => t.uriTemplate), [
      'bidi://agent/{agent}/session/{sessionId}',
      'bidi://agent/{agent}/session/{sessionId}/artifact/{name}',
    ], 'the templates');
    const missing = await mcpError(client.readResource({ uri: 'bidi://agent/chat/session/nope' }));
    assertJson(missing.code, -32002, `resource not found (${missing.message})`);
  });

  await check(`${transportName}: a session subscribed to tells of its next turn`, async () => {
    const first = await client.callTool({ name: 'chat', arguments: { message: 'watch me' } });
    const { sessionId } = first.structuredContent;
    const uri = `bidi://agent/chat/session/${sessionId}`;
    const updated = new Promise((resolve) => {
      client.setNotificationHandler(ResourceUpdatedNotificationSchema, (notification) => {
        if (notification.params.uri === uri) resolve(notification.params);
      });
    });
    await client.subscribeResource({ uri });
    await client.callTool({ name: 'chat', arguments: { message: 'once more', sessionId } });
    const heard = await Promise.race([updated, sleep(60_000).then(() => null)]);
    assertJson(heard, { uri }, 'notifications/resources/updated');
    await client.unsubscribeResource({ uri });
    const missing = await mcpError(client.subscribeResource({ uri: 'bidi://agent/chat/session/nope' }));
    assertJson(missing.code, -32002, `resource not found (${missing.message})`);
  });

  await check(`${transportName}: without elicitation, the result names the call waiting for approval, and approvals answer it`, async () => {
    const first = await client.callTool({ name: 'bank', arguments: { message: 'send bob 5' } });
    assert(!first.isError, () => JSON.stringify(first));
    const { text, sessionId, pendingApprovals } = first.structuredContent;
    assertJson(text, 'Let me use transfer.', 'what the model said so far');
    assert(pendingApprovals?.length === 1, () => `pendingApprovals: ${JSON.stringify(first.structuredContent)}`);
    const [waiting] = pendingApprovals;
    assertJson([waiting.name, waiting.arguments], ['transfer', { to: 'bob', amount: 5 }], 'the waiting call');
    const said = first.content.map((block) => block.text).join('\n');
    for (const part of [`call \`${waiting.toolCallId}\`: transfer with {`, '"amount":5', '"to":"bob"', '"approvals"', sessionId]) {
      assert(said.includes(part), () => `the text names ${part}: ${said}`);
    }

    const unknown = await mcpError(client.callTool({
      name: 'bank', arguments: { sessionId, approvals: [{ toolCallId: 'nope', approved: true }] },
    }));
    assert(unknown.code === -32602 && unknown.message.includes('/approvals/0/toolCallId'), unknown.message);
    const shape = await mcpError(client.callTool({
      name: 'bank', arguments: { sessionId, approvals: [{ toolCallId: waiting.toolCallId, approved: 'yes' }] },
    }));
    assert(shape.code === -32602 && shape.message.includes('/approvals/0/approved'), shape.message);
    const undecided = await mcpError(client.callTool({ name: 'bank', arguments: { sessionId, message: 'hello?' } }));
    assert(undecided.code === -32602 && undecided.message.includes('/approvals'), undecided.message);
    assert(undecided.message.includes(waiting.toolCallId), undecided.message);
    const sessionless = await mcpError(client.callTool({
      name: 'bank', arguments: { approvals: [{ toolCallId: waiting.toolCallId, approved: true }] },
    }));
    assert(sessionless.code === -32602 && sessionless.message.includes('/sessionId'), sessionless.message);

    const answered = await client.callTool({
      name: 'bank', arguments: { sessionId, approvals: [{ toolCallId: waiting.toolCallId, approved: true }] },
    });
    assertJson(answered.structuredContent, { text: 'transfer said: sent 5 to bob', sessionId }, 'the tool ran, the answer goes on');

    const again = await client.callTool({ name: 'bank', arguments: { sessionId, message: 'once more' } });
    const [next] = again.structuredContent.pendingApprovals;
    const denied = await client.callTool({
      name: 'bank',
      arguments: { sessionId, approvals: [{ toolCallId: next.toolCallId, approved: false, reason: 'not twice' }] },
    });
    assertJson(denied.structuredContent.text, 'transfer said: the user denied this call: not twice', 'the model read the denial');
  });

  await check(`${transportName}: an unknown session is -32602 naming sessionId`, async () => {
    const error = await mcpError(client.callTool({ name: 'chat', arguments: { message: 'hi', sessionId: 'nope' } }));
    assert(error.code === -32602, () => `code ${error.code}: ${error.message}`);
    assert(error.message.includes('/sessionId'), error.message);
  });

  await check(`${transportName}: bad arguments are -32602 naming the field`, async () => {
    const error = await mcpError(client.callTool({ name: 'count', arguments: { upTo: 'three' } }));
    assert(error.code === -32602, () => `code ${error.code}: ${error.message}`);
    assert(error.message.includes('/upTo'), error.message);
    const init = await mcpError(client.callTool({ name: 'greet', arguments: { input: 'Ada', init: { greting: 'Hi' } } }));
    assert(init.code === -32602 && init.message.includes('/init'), init.message);
    const unknown = await mcpError(client.callTool({ name: 'nope', arguments: {} }));
    assert(unknown.code === -32602 && unknown.message.includes('nope'), unknown.message);
  });

  await check(`${transportName}: an aborted call cancels the flow's connection`, async () => {
    const controller = new AbortController();
    const call = client.callTool(
      { name: 'slow', arguments: { input: 'x' } },
      undefined,
      { signal: controller.signal, onprogress: () => controller.abort('enough') },
    );
    const error = await call.then(
      (result) => { throw new Error(`expected an abort, got ${JSON.stringify(result)}`); },
      (error) => error,
    );
    assert(/enough|abort/i.test(describe(error)), describe(error));
    const marker = join(markers, transportName);
    // The server writes the file as the flow ends: wait for its text, not just for the file.
    const written = () => (existsSync(marker) ? readFileSync(marker, 'utf8') : '');
    while (written() === '') await sleep(20);
    const cause = written();
    assert(cause.includes('the MCP client cancelled the call'), `the cause: ${cause}`);
  });
}

/**
 * A client whose elicitation handler answers by `asked.answer(request, extra)`, recording each
 * question in `asked.questions`.
 */
function askedClient(asked) {
  const client = new Client({ name: 'bidi-tests-elicit', version: '0.0.0' }, { capabilities: { elicitation: {} } });
  client.setRequestHandler(ElicitRequestSchema, (request, extra) => {
    asked.questions.push(request.params);
    return asked.answer(request, extra);
  });
  return client;
}

async function elicitationChecks(transportName, client, asked) {
  await check(`${transportName}: a call that needs approval is asked through elicitation; approved, the tool runs and the answer goes on`, async () => {
    asked.answer = () => ({ action: 'accept', content: { approved: true } });
    const before = asked.questions.length;
    const { result, notified } = await watched(client, { name: 'bank', arguments: { message: 'send bob 5' } });
    assert(!result.isError, () => JSON.stringify(result));
    const whole = 'Let me use transfer.\n\ntransfer said: sent 5 to bob';
    assertJson(result.structuredContent.text, whole, 'the whole answer');
    assert(result.structuredContent.pendingApprovals === undefined, 'nothing waits');
    assertJson(result.content, [{ type: 'text', text: whole }], 'the text');
    assertJson(notified.map((n) => n.params.message).join(''), whole, 'the text as progress, across the approval');
    assert(asked.questions.length === before + 1, () => `one question: ${JSON.stringify(asked.questions.slice(before))}`);
    const question = asked.questions.at(-1);
    assert(question.message.startsWith('The agent bank asks to run transfer with {'), question.message);
    assert(question.message.includes('"amount":5') && question.message.includes('"to":"bob"'), question.message);
    assert(question.requestedSchema.properties.approved?.type === 'boolean', () => JSON.stringify(question.requestedSchema));
    assert(question.requestedSchema.properties.reason?.type === 'string', () => JSON.stringify(question.requestedSchema));
    assertJson(question.requestedSchema.required, ['approved'], 'approved is required');
  });

  await check(`${transportName}: denied through elicitation, the model reads the denial and its reason`, async () => {
    asked.answer = () => ({ action: 'accept', content: { approved: false, reason: 'too much' } });
    const result = await client.callTool({ name: 'bank', arguments: { message: 'send bob 5' } });
    assertJson(result.structuredContent.text, 'Let me use transfer.\n\ntransfer said: the user denied this call: too much', 'the answer');
    asked.answer = () => ({ action: 'decline' });
    const declined = await client.callTool({ name: 'bank', arguments: { message: 'send bob 5' } });
    assertJson(declined.structuredContent.text, 'Let me use transfer.\n\ntransfer said: the user denied this call', 'declined');
  });

  await check(`${transportName}: a call cancelled while its approval is asked cancels the question`, async () => {
    let aborted = false;
    const before = asked.questions.length;
    asked.answer = (_request, extra) => new Promise((resolve) => {
      extra.signal.addEventListener('abort', () => {
        aborted = true;
        resolve({ action: 'cancel' });
      });
    });
    const controller = new AbortController();
    const call = client.callTool(
      { name: 'bank', arguments: { message: 'send bob 5' } },
      undefined,
      { signal: controller.signal },
    );
    const outcome = call.then(
      (result) => { throw new Error(`expected an abort, got ${JSON.stringify(result)}`); },
      (error) => error,
    );
    while (asked.questions.length === before) await sleep(20);
    controller.abort('enough');
    const error = await outcome;
    assert(/enough|abort/i.test(describe(error)), describe(error));
    while (!aborted) await sleep(20);
  });
}

/** The blocks of a sampling message's content, one or many. */
const blocks = (content) => (Array.isArray(content) ? content : [content]);

/**
 * A client lending its model through sampling, with tools: `host.model(params)` answers each
 * request, recorded in `host.requests`. The model calls `capital` for the country a user's
 * question names, and says what a tool result says.
 */
function samplingClient(host) {
  const client = new Client(
    { name: 'bidi-tests-sampling', version: '0.0.0' },
    { capabilities: { sampling: { tools: {} } } },
  );
  client.setRequestHandler(CreateMessageRequestSchema, (request) => {
    host.requests.push(request.params);
    return host.model(request.params);
  });
  return client;
}

/** The host's model of `samplingClient`. */
function capitals(params) {
  const last = blocks(params.messages.at(-1).content)[0];
  if (last.type === 'tool_result') {
    return {
      role: 'assistant',
      content: { type: 'text', text: `The capital is ${last.content[0].text}.` },
      model: 'host-model',
      stopReason: 'endTurn',
    };
  }
  const country = last.text.includes('Peru') ? 'Peru' : 'France';
  return {
    role: 'assistant',
    content: { type: 'tool_use', id: `use-${country}`, name: 'capital', input: { country } },
    model: 'host-model',
    stopReason: 'toolUse',
  };
}

async function samplingChecks(transportName, client, host) {
  await check(`${transportName}: an agent with no model answers with the client's through sampling, its tool run between`, async () => {
    host.requests = [];
    host.model = capitals;
    const first = await client.callTool({ name: 'atlas', arguments: { message: 'Capital of France?' } });
    assert(!first.isError, () => JSON.stringify(first));
    assertJson(first.structuredContent.text, 'The capital is Paris.', 'the host model\'s answer');
    assert(host.requests.length === 2, () => `two samplings: ${JSON.stringify(host.requests)}`);
    const [asked, told] = host.requests;
    assertJson(asked.messages, [{ role: 'user', content: { type: 'text', text: 'Capital of France?' } }], 'the question');
    assertJson(asked.tools.map((tool) => tool.name), ['capital'], 'the agent\'s tool');
    assert(asked.tools[0].inputSchema.properties.country, () => JSON.stringify(asked.tools[0]));
    assert(asked.maxTokens === 4096, () => `maxTokens: ${asked.maxTokens}`);
    assertJson(told.messages.slice(1), [
      { role: 'assistant', content: { type: 'tool_use', name: 'capital', id: 'use-France', input: { country: 'France' } } },
      { role: 'user', content: { type: 'tool_result', toolUseId: 'use-France', content: [{ type: 'text', text: 'Paris' }] } },
    ], 'the call and its result');

    const { sessionId } = first.structuredContent;
    const second = await client.callTool({ name: 'atlas', arguments: { message: 'And Peru?', sessionId } });
    assertJson(second.structuredContent.text, 'The capital is Lima.', 'the next answer');
    const next = host.requests[2].messages;
    assertJson(next.length, 5, 'the conversation so far, and the new question');
    assertJson(next[3], { role: 'assistant', content: { type: 'text', text: 'The capital is Paris.' } }, 'the first answer');
    assertJson(next[4], { role: 'user', content: { type: 'text', text: 'And Peru?' } }, 'the new question');
  });

  await check(`${transportName}: the client refusing to sample fails the turn with its words`, async () => {
    host.model = () => {
      throw new McpError(-1, 'User rejected sampling request');
    };
    const result = await client.callTool({ name: 'atlas', arguments: { message: 'Capital of France?' } });
    assert(result.isError === true, () => JSON.stringify(result));
    assert(result.content[0].text.includes('User rejected sampling request'), () => result.content[0].text);
  });
}

await run(async (url) => {
  assert(bin && markers, 'MCP_SERVER_BIN and MCP_MARKER_DIR are set');
  const stdio = new Client({ name: 'bidi-tests', version: '0.0.0' });
  await stdio.connect(new StdioClientTransport({
    command: bin,
    args: ['stdio'],
    env: { ...process.env, MCP_MARKER: join(markers, 'stdio') },
    stderr: 'inherit',
  }));
  await checks('stdio', stdio);
  await stdio.close();

  const asked = { questions: [], answer: () => ({ action: 'decline' }) };
  const stdioAsked = askedClient(asked);
  await stdioAsked.connect(new StdioClientTransport({ command: bin, args: ['stdio'], stderr: 'inherit' }));
  await elicitationChecks('stdio', stdioAsked, asked);
  await stdioAsked.close();

  const host = { requests: [], model: capitals };
  const stdioSampling = samplingClient(host);
  await stdioSampling.connect(new StdioClientTransport({ command: bin, args: ['stdio'], stderr: 'inherit' }));
  await samplingChecks('stdio', stdioSampling, host);
  await stdioSampling.close();

  const http = new Client({ name: 'bidi-tests', version: '0.0.0' });
  await http.connect(new StreamableHTTPClientTransport(new URL(`${url}/mcp`)));
  await checks('http', http);
  await http.close();

  const httpAsked = askedClient(asked);
  await httpAsked.connect(new StreamableHTTPClientTransport(new URL(`${url}/mcp`)));
  await elicitationChecks('http', httpAsked, asked);
  await httpAsked.close();

  const httpSampling = samplingClient(host);
  await httpSampling.connect(new StreamableHTTPClientTransport(new URL(`${url}/mcp`)));
  await samplingChecks('http', httpSampling, host);
  await httpSampling.close();
});

// Calls a tool with a progress token and watches what arrives, in order, as the transport
// hands it over: the progress notifications before the result, and what `onprogress` got. The
// SDK runs notification handlers a microtask after a response it reads in the same chunk, and
// drops the progress of a request it has answered: over a pipe (or under load), `onprogress`
// may miss progress that arrived in time. So the order on the wire is what is checked.
async function watched(client, params) {
  const seen = [];
  const inner = client.transport.onmessage;
  client.transport.onmessage = (message, extra) => {
    seen.push(message);
    inner(message, extra);
  };
  const progress = [];
  let result;
  try {
    result = await client.callTool(params, undefined, { onprogress: (p) => progress.push(p) });
  } finally {
    client.transport.onmessage = inner;
  }
  const answered = seen.findIndex((message) => message.result !== undefined || message.error !== undefined);
  const notified = seen
    .slice(0, answered)
    .filter((message) => message.method === 'notifications/progress');
  return { result, notified, progress };
}

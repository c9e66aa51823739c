// @ag-ui/client 1.0.0's HttpAgent against a bidi HTTP server's AG-UI endpoint
// (`POST /agent/{name}/ag-ui`). Usage: node agui_client.mjs <baseUrl>
//
// Agents the server must serve, each on a scripted model:
// - /agent/writer: answers "Hello world" (after thinking "let me see").
// - /agent/deployer: answers "Asking" and calls the frontend tool `confirm` with
//   {"action":"deploy"} (id `call-1`); once it has the result, answers "Deployed".
// - /agent/broken: streams "Half an answer" and fails mid-text with "the model broke".
// - /agent/calculator: calls its local tool `add` with {"a":2,"b":3} (id `call-1`), which sends
//   the data `sum` {"sum":5} and returns "5", then answers "5".
// - /agent/guarded: answers "Checking" and calls its local tool `wipe` with {"target":"db"}
//   (id `call-1`), which needs approval and returns "wiped db"; once it has the tool's result,
//   answers "Wiped" the first time and "Not wiped" the second.

import { HttpAgent } from '@ag-ui/client';
import { MessageSchema } from '@ag-ui/core/schemas';
import { assert, assertJson, check, run } from './harness.mjs';

const confirm = {
  name: 'confirm',
  description: 'Asks the user to confirm an action',
  parameters: { type: 'object', properties: { action: { type: 'string' } } },
};

/** Keeps what a run reported to its subscriber. */
function recorder() {
  const seen = { finished: undefined, errors: [], types: [], custom: [] };
  seen.subscriber = {
    onCustomEvent: ({ event }) => {
      seen.custom.push({ name: event.name, value: event.value });
    },
    onEvent: ({ event }) => {
      seen.types.push(event.type);
    },
    onRunFinishedEvent: (params) => {
      seen.finished = params;
    },
    onRunErrorEvent: ({ event }) => {
      seen.errors.push(event);
    },
  };
  return seen;
}

/** A value with its object keys sorted, so that JSON comparisons ignore their order. */
function canon(value) {
  if (Array.isArray(value)) return value.map(canon);
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.keys(value).sort().map((key) => [key, canon(value[key])]));
  }
  return value;
}

/** The messages without their ids (each must have one), keys sorted. */
function strip(messages) {
  return canon(messages.map(({ id, ...rest }) => {
    assert(typeof id === 'string' && id.length > 0, 'every message has an id');
    return rest;
  }));
}

await run(async (base) => {
  await check('a text run adds the reasoning and the answer to the messages', async () => {
    const agent = new HttpAgent({
      url: `${base}/agent/writer/ag-ui`,
      threadId: 'text-1',
      initialMessages: [{ id: 'u1', role: 'user', content: 'hi' }],
    });
    const seen = recorder();
    const { newMessages } = await agent.runAgent({ runId: 'run-1' }, seen.subscriber);
    assertJson(strip(newMessages), canon([
      { role: 'reasoning', content: 'let me see' },
      { role: 'assistant', content: 'Hello world' },
    ]), 'new messages');
    assert(seen.finished?.outcome === 'success', 'outcome success');
    assertJson(seen.finished.pendingToolCallIds, [], 'nothing pending');
    assertJson(seen.types.at(0), 'RUN_STARTED', 'first event');
    assertJson(seen.types.at(-1), 'RUN_FINISHED', 'last event');
  });

  await check('the state the client sends comes back as a snapshot', async () => {
    const agent = new HttpAgent({
      url: `${base}/agent/writer/ag-ui`,
      threadId: 'state-1',
      initialMessages: [{ id: 'u1', role: 'user', content: 'hi' }],
      initialState: { count: 1, items: ['a'] },
    });
    const seen = recorder();
    let snapshot;
    await agent.runAgent({ runId: 'run-1' }, {
      ...seen.subscriber,
      onStateSnapshotEvent: ({ event }) => {
        snapshot = event.snapshot;
      },
    });
    assertJson(snapshot, { count: 1, items: ['a'] }, 'snapshot');
    assertJson(agent.state, { count: 1, items: ['a'] }, 'state');
  });

  await check('a frontend tool call leaves the run pending, and a tool message resumes it', async () => {
    const agent = new HttpAgent({
      url: `${base}/agent/deployer/ag-ui`,
      threadId: 'tool-1',
      initialMessages: [{ id: 'u1', role: 'user', content: 'deploy, please' }],
    });
    const first = recorder();
    const { newMessages } = await agent.runAgent({ runId: 'run-1', tools: [confirm] }, first.subscriber);
    assertJson(strip(newMessages), canon([{
      role: 'assistant',
      content: 'Asking',
      toolCalls: [{ id: 'call-1', type: 'function', function: { name: 'confirm', arguments: '{"action":"deploy"}' } }],
    }]), 'first run messages');
    assert(first.finished?.outcome === 'success', 'outcome success');
    assertJson(first.finished.pendingToolCallIds, ['call-1'], 'pending tool calls');

    agent.addMessage({ id: 'r1', role: 'tool', toolCallId: 'call-1', content: 'true' });
    const second = recorder();
    const resumed = await agent.runAgent({ runId: 'run-2', tools: [confirm] }, second.subscriber);
    assertJson(strip(resumed.newMessages), canon([{ role: 'assistant', content: 'Deployed' }]), 'second run messages');
    assertJson(second.finished?.pendingToolCallIds, [], 'nothing pending');
    assertJson(agent.messages.map((message) => message.role), ['user', 'assistant', 'tool', 'assistant'], 'thread');
  });

  await check('an error mid-stream resolves the run with RUN_ERROR, the partial text kept', async () => {
    const agent = new HttpAgent({
      url: `${base}/agent/broken/ag-ui`,
      threadId: 'error-1',
      initialMessages: [{ id: 'u1', role: 'user', content: 'go' }],
    });
    const seen = recorder();
    const { newMessages } = await agent.runAgent({ runId: 'run-1' }, seen.subscriber);
    assert(seen.errors.length === 1, () => `${seen.errors.length} RUN_ERRORs`);
    assert(seen.errors[0].message.includes('the model broke'), () => seen.errors[0].message);
    assert(seen.finished === undefined, 'no RUN_FINISHED');
    assertJson(seen.types.slice(-2), ['TEXT_MESSAGE_END', 'RUN_ERROR'], 'the text ends, then the run fails');
    assertJson(strip(newMessages), canon([{ role: 'assistant', content: 'Half an answer' }]), 'partial message');
  });

  await check('a local tool call and its result are messages of the run', async () => {
    const agent = new HttpAgent({
      url: `${base}/agent/calculator/ag-ui`,
      threadId: 'calc-1',
      initialMessages: [{ id: 'u1', role: 'user', content: '2+3?' }],
    });
    const seen = recorder();
    const { newMessages } = await agent.runAgent({ runId: 'run-1' }, seen.subscriber);
    assertJson(strip(newMessages), canon([
      {
        role: 'assistant',
        toolCalls: [{ id: 'call-1', type: 'function', function: { name: 'add', arguments: '{"a":2,"b":3}' } }],
      },
      { toolCallId: 'call-1', role: 'tool', content: '5' },
      { role: 'assistant', content: '5' },
    ]), 'new messages');
    assertJson(seen.finished?.pendingToolCallIds, [], 'nothing pending');
    assertJson(seen.custom, [{ name: 'sum', value: { toolCallId: 'call-1', data: { sum: 5 } } }], 'the tool\'s data');
  });

  await check('a stored thread reloads as AG-UI messages the client schema accepts', async () => {
    const response = await fetch(`${base}/agent/calculator/ag-ui/calc-1`);
    assert(response.status === 200, `status ${response.status}`);
    const messages = (await response.json()).map((message) => MessageSchema.parse(message));
    assertJson(strip(messages), canon([
      { role: 'user', content: '2+3?' },
      {
        role: 'assistant',
        toolCalls: [{ id: 'call-1', type: 'function', function: { name: 'add', arguments: '{"a":2,"b":3}' } }],
      },
      { toolCallId: 'call-1', role: 'tool', content: '5' },
      { role: 'assistant', content: '5' },
    ]), 'the thread');
    const missing = await fetch(`${base}/agent/calculator/ag-ui/no-such-thread`);
    assert(missing.status === 404, `status ${missing.status}`);
  });

  await check('an approval interrupts the run, and resume answers it once (idempotent)', async () => {
    const url = `${base}/agent/guarded/ag-ui`;
    const agent = new HttpAgent({
      url,
      threadId: 'approve-1',
      initialMessages: [{ id: 'u1', role: 'user', content: 'wipe the db' }],
    });
    const first = recorder();
    const { newMessages } = await agent.runAgent({ runId: 'run-1' }, first.subscriber);
    assert(first.finished?.outcome === 'interrupt', () => `outcome ${first.finished?.outcome}`);
    assertJson(
      first.finished.interrupts.map(({ id, reason, toolCallId }) => ({ id, reason, toolCallId })),
      [{ id: 'approval-call-1', reason: 'tool_approval', toolCallId: 'call-1' }],
      'interrupts',
    );
    assert(first.finished.interrupts[0].message.includes('wipe'), 'the interrupt says what runs');
    assertJson(agent.pendingInterrupts.map((i) => i.id), ['approval-call-1'], 'pending interrupts');
    assertJson(first.types.slice(-2), ['MESSAGES_SNAPSHOT', 'RUN_FINISHED'], 'the snapshot comes before the interrupting end');
    assertJson(strip(newMessages), canon([{
      role: 'assistant',
      content: 'Checking',
      toolCalls: [{ id: 'call-1', type: 'function', function: { name: 'wipe', arguments: '{"target":"db"}' } }],
    }]), 'first run messages');
    assertJson(agent.messages.map((m) => m.id).slice(0, 1), ['u1'], 'the snapshot keeps the client ids');

    // The client itself refuses a run that leaves the interrupt unanswered.
    let refused;
    try {
      await agent.runAgent({ runId: 'run-x' });
    } catch (error) {
      refused = error;
    }
    assert(refused !== undefined, 'HttpAgent refuses to run past a pending interrupt');

    // Another client on the thread sends new input without a resume: RUN_ERROR.
    const other = new HttpAgent({
      url,
      threadId: 'approve-1',
      initialMessages: [{ id: 'u9', role: 'user', content: 'never mind, say hi' }],
    });
    const blocked = recorder();
    await other.runAgent({ runId: 'run-y' }, blocked.subscriber);
    assert(blocked.errors.length === 1, () => `${blocked.errors.length} RUN_ERRORs`);
    assertJson(blocked.errors[0].code, 'interrupts_pending', 'error code');
    assert(blocked.errors[0].message.includes('approval-call-1'), () => blocked.errors[0].message);

    const resume = [{ interruptId: 'approval-call-1', status: 'resolved', payload: { approved: true } }];
    const second = recorder();
    const resumed = await agent.runAgent({ runId: 'run-2', resume }, second.subscriber);
    assert(second.finished?.outcome === 'success', () => `outcome ${second.finished?.outcome}`);
    assertJson(strip(resumed.newMessages), canon([
      { role: 'tool', toolCallId: 'call-1', content: 'wiped db' },
      { role: 'assistant', content: 'Wiped' },
    ]), 'second run messages');
    assertJson(agent.pendingInterrupts, [], 'no pending interrupt');

    // The same resume again (a retried request): nothing runs, the run succeeds.
    const again = new HttpAgent({ url, threadId: 'approve-1', initialMessages: agent.messages });
    const third = recorder();
    const repeated = await again.runAgent({ runId: 'run-3', resume }, third.subscriber);
    assert(third.finished?.outcome === 'success', () => `outcome ${third.finished?.outcome}`);
    assertJson(third.types, ['RUN_STARTED', 'RUN_FINISHED'], 'a repeated resume does nothing');
    assertJson(repeated.newMessages, [], 'no new messages');

    // A resume naming an interrupt the thread never had fails.
    const wrong = recorder();
    await again.runAgent({
      runId: 'run-4',
      resume: [{ interruptId: 'approval-nope', status: 'resolved' }],
    }, wrong.subscriber);
    assertJson(wrong.errors.map((e) => e.code), ['no_interrupt'], 'unknown interrupt');
  });

  await check('a cancelled interrupt denies the call, and the model reads the reason', async () => {
    const agent = new HttpAgent({
      url: `${base}/agent/guarded/ag-ui`,
      threadId: 'deny-1',
      initialMessages: [{ id: 'u1', role: 'user', content: 'wipe the db' }],
    });
    await agent.runAgent({ runId: 'run-1' });
    assertJson(agent.pendingInterrupts.map((i) => i.id), ['approval-call-1'], 'pending interrupts');
    const seen = recorder();
    const { newMessages } = await agent.runAgent({
      runId: 'run-2',
      resume: [{ interruptId: 'approval-call-1', status: 'cancelled', payload: { reason: 'backups first' } }],
    }, seen.subscriber);
    assert(seen.finished?.outcome === 'success', () => `outcome ${seen.finished?.outcome}`);
    assertJson(strip(newMessages), canon([
      { role: 'tool', toolCallId: 'call-1', content: 'the user denied this call: backups first' },
      { role: 'assistant', content: 'Not wiped' },
    ]), 'messages');
  });
});

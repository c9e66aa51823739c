// The official A2A JavaScript SDK's client (`@a2a-js/sdk` 1.3.0, A2A 1.0 over JSON-RPC) driving
// bidi `LlmAgent`s over bidi-http's A2A wire. Usage: node a2a_client.mjs <baseUrl>
//
// The server is `tests/tests/a2a_clients.rs`'s: `helper` (scripted answers), `tools` (a remote
// tool `lookup` and a tool `wipe` that needs approval), `ask` (the same tools, a task that asks
// for input again and again), `slow` (a model that answers only when `POST /finish` says so, or
// calls `lookup` when `POST /ask` does), `memo` (client-managed). Each check prints one JSON line,
// `{"check": name, ...what it saw}` (or `{"check": name, "error": why}`), and the Rust test
// asserts what it saw. The last line is `N passed, M failed`: M checks threw. `hooked` answers
// once; its task's state changes go to the webhook receivers at <hookUrl> (`hook/js`).
// Usage: node a2a_client.mjs <baseUrl> <hookUrl> [JSONRPC|HTTP+JSON]: the clients speak the
// binding named (JSON-RPC by default); the raw checks of what the SDK never sends speak JSON-RPC.

import { ClientFactory, ClientFactoryOptions } from '@a2a-js/sdk/client';
import { Role, taskStateToJSON } from '@a2a-js/sdk';

const base = process.argv[2]?.replace(/\/+$/, '');
const hooks = process.argv[3]?.replace(/\/+$/, '');
const binding = process.argv[4] ?? 'JSONRPC';
if (!base || !hooks) {
  console.log('usage: node a2a_client.mjs <baseUrl> <hookUrl>');
  console.log('0 passed, 1 failed');
  process.exit(2);
}

let passed = 0;
let failed = 0;

/** Runs `fn`, printing what it returns (or why it threw) as one JSON line. */
async function check(name, fn) {
  try {
    const seen = await fn();
    console.log(JSON.stringify({ check: name, ...seen }));
    passed += 1;
  } catch (error) {
    console.log(JSON.stringify({ check: name, error: String(error?.stack ?? error) }));
    failed += 1;
  }
}

const factory = new ClientFactory(
  ClientFactoryOptions.createFrom(ClientFactoryOptions.default, { preferredTransports: [binding] }),
);
const clients = {};
async function client(agent) {
  clients[agent] ??= await factory.createFromUrl(`${base}/agent/${agent}/a2a`);
  return clients[agent];
}

let counter = 0;
/** A user message: text parts for strings, data parts for objects. */
function message(parts, ids = {}) {
  counter += 1;
  return {
    messageId: `m-${counter}`,
    role: Role.ROLE_USER,
    parts: parts.map((part) =>
      typeof part === 'string'
        ? { content: { $case: 'text', value: part }, metadata: undefined, filename: '', mediaType: '' }
        : { content: { $case: 'data', value: part }, metadata: undefined, filename: '', mediaType: 'application/json' },
    ),
    contextId: ids.contextId ?? '',
    taskId: ids.taskId ?? '',
    extensions: [],
    referenceTaskIds: [],
  };
}

const text = (parts) => (parts ?? []).filter((p) => p.content?.$case === 'text').map((p) => p.content.value).join('');
const data = (parts) => (parts ?? []).find((p) => p.content?.$case === 'data')?.content.value;
const state = (task) => taskStateToJSON(task.status?.state);
/** A task as plain JSON: its ids, state, status text and data, answer text and history. */
function seen(task) {
  return {
    id: task.id,
    contextId: task.contextId,
    state: state(task),
    statusText: text(task.status?.message?.parts),
    statusData: data(task.status?.message?.parts) ?? null,
    answer: (task.artifacts ?? []).map((a) => text(a.parts)).join('|'),
    artifacts: (task.artifacts ?? []).map((a) => a.artifactId),
    history: (task.history ?? []).map((m) => `${m.role === Role.ROLE_USER ? 'user' : 'agent'}:${text(m.parts)}`),
  };
}
/** An event of a stream as one short word, and the answer text the stream carried. */
function events(all) {
  const kinds = [];
  let answer = '';
  for (const { payload } of all) {
    if (payload.$case === 'task') kinds.push(`task:${state(payload.value)}`);
    if (payload.$case === 'statusUpdate') kinds.push(`status:${taskStateToJSON(payload.value.status.state)}`);
    if (payload.$case === 'artifactUpdate') {
      const { artifact, append, lastChunk } = payload.value;
      kinds.push(`artifact:${artifact.artifactId}:${append ? 'append' : 'new'}${lastChunk ? ':last' : ''}`);
      answer += text(artifact.parts);
    }
  }
  return { kinds, answer };
}
/** The JSON-RPC codes of the SDK's errors, for an error over HTTP+JSON, which has none. */
const CODES = {
  TaskNotFoundError: -32001, TaskNotCancelableError: -32002, PushNotificationNotSupportedError: -32003,
  UnsupportedOperationError: -32004, ContentTypeNotSupportedError: -32005, RequestMalformedError: -32602,
  VersionNotSupportedError: -32009,
};
/** What an SDK error says: its class, JSON-RPC code (that of its class over HTTP+JSON), HTTP
 * status (over HTTP+JSON) and message. */
async function refusal(promise) {
  try {
    const value = await promise;
    return { refused: false, value: JSON.stringify(value) };
  } catch (error) {
    return {
      refused: true,
      name: error.name,
      code: error.envelopeCode ?? CODES[error.name] ?? null,
      status: error.statusCode ?? null,
      message: error.message,
    };
  }
}
/** A raw JSON-RPC call of A2A 1.0, for what the SDK never sends. */
async function raw(agent, body, headers = {}) {
  const response = await fetch(`${base}/agent/${agent}/a2a`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'a2a-version': '1.0', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: response.status, body: await response.json() };
}

let first;
let streamed;

await check('card', async () => {
  const helper = await client('helper');
  const card = await helper.getAgentCard();
  const byPath = await factory.createFromUrl(`${base}/agent/helper/a2a/`);
  return {
    name: card.name,
    streaming: card.capabilities?.streaming ?? false,
    url: card.supportedInterfaces[0].url,
    binding: card.supportedInterfaces[0].protocolBinding,
    version: card.supportedInterfaces[0].protocolVersion,
    inputModes: card.defaultInputModes,
    outputModes: card.defaultOutputModes,
    skills: card.skills.map((s) => s.id),
    sameCardUnderTheEndpoint: (await byPath.getAgentCard()).name === card.name,
  };
});

await check('send', async () => {
  const task = await (await client('helper')).sendMessage({ message: message(['hello']) });
  first = task;
  return seen(task);
});

await check('send in the same context', async () => {
  const task = await (await client('helper')).sendMessage({
    message: message(['again'], { contextId: first.contextId }),
    configuration: { acceptedOutputModes: ['text/plain'], historyLength: 2, returnImmediately: false },
  });
  return { ...seen(task), sameContext: task.contextId === first.contextId, newTask: task.id !== first.id };
});

await check('stream', async () => {
  const all = [];
  for await (const event of (await client('helper')).sendMessageStream({ message: message(['stream please']) })) {
    all.push(event);
  }
  streamed = all[0].payload.value;
  return events(all);
});

await check('get', async () => {
  const task = await (await client('helper')).getTask({ id: streamed.id, historyLength: 1 });
  return seen(task);
});

await check('send returning at once, then get', async () => {
  const helper = await client('helper');
  const task = await helper.sendMessage({
    message: message(['later']),
    configuration: { acceptedOutputModes: [], returnImmediately: true },
  });
  let now = task;
  // Until it is over; the check's own deadline bounds a task that never ends.
  while (state(now) === 'TASK_STATE_WORKING') {
    await new Promise((resolve) => setTimeout(resolve, 25));
    now = await helper.getTask({ id: task.id });
  }
  return { first: state(task), sameTask: now.id === task.id, ...seen(now) };
});

await check('a failing turn', async () => {
  const task = await (await client('helper')).sendMessage({ message: message(['fail']) });
  return seen(task);
});

await check('input required: a remote tool', async () => {
  const tools = await client('tools');
  const asked = await tools.sendMessage({ message: message(['find the file']) });
  const call = data(asked.status.message.parts).awaitingToolExecution[0];
  const answered = await tools.sendMessage({
    message: message([{ results: [{ toolCallId: call.id, output: { path: '/tmp/file' } }] }], {
      taskId: asked.id,
      contextId: asked.contextId,
    }),
  });
  return {
    asked: seen(asked),
    answered: seen(answered),
    sameContext: answered.contextId === asked.contextId,
    sameTask: answered.id === asked.id,
  };
});

await check('input required: an approval, streamed', async () => {
  const tools = await client('tools');
  const asked = [];
  for await (const event of tools.sendMessageStream({ message: message(['wipe the disk']) })) asked.push(event);
  const task = asked[0].payload.value;
  const last = asked[asked.length - 1].payload.value;
  const call = data(last.status.message.parts).awaitingApproval[0];
  const answered = [];
  const reply = message([{ approvals: [{ toolCallId: call.id, approved: true }] }], {
    taskId: task.id,
    contextId: task.contextId,
  });
  for await (const event of tools.sendMessageStream({ message: reply })) answered.push(event);
  return {
    asked: events(asked).kinds,
    pending: data(last.status.message.parts),
    answered: events(answered),
    sameTask: answered.every(({ payload }) => (payload.value.taskId ?? payload.value.id) === task.id),
  };
});

await check('input required: an answer to no pending call', async () => {
  const tools = await client('tools');
  const asked = await tools.sendMessage({ message: message(['find the file']) });
  const wrong = message([{ results: [{ toolCallId: 'nobody', toolName: 'lookup', output: 'x' }] }], {
    taskId: asked.id,
  });
  const refused = await refusal(tools.sendMessage({ message: wrong }));
  const call = data(asked.status.message.parts).awaitingToolExecution[0];
  const right = message([{ results: [{ toolCallId: call.id, output: 'found' }] }], { taskId: asked.id });
  const answered = await tools.sendMessage({ message: right });
  return { refused, answered: state(answered) };
});

await check('cancel a running task', async () => {
  const slow = await client('slow');
  const stream = slow.sendMessageStream({ message: message(['wait']) });
  const all = [];
  let canceled;
  for await (const event of stream) {
    all.push(event);
    if (all.length === 2) {
      canceled = await slow.cancelTask({ id: event.payload.value.taskId });
    }
  }
  const again = await slow.getTask({ id: canceled.id });
  return { canceled: state(canceled), stream: events(all).kinds, after: state(again) };
});

/** The events of `task` resubscribed to, `slow` told to finish once the first one is in. */
async function followToTheEnd(slow, task) {
  const all = [];
  for await (const event of slow.resubscribeTask({ id: task.id })) {
    all.push(event);
    if (all.length === 1) await fetch(`${base}/finish`, { method: 'POST' });
  }
  return all;
}

await check('subscribe to a running task', async () => {
  const slow = await client('slow');
  const stream = slow.sendMessageStream({ message: message(['take your time']) });
  let task;
  for await (const event of stream) {
    task = event.payload.value;
    break;
  }
  const all = await followToTheEnd(slow, task);
  return { ...events(all), first: all[0].payload.$case, sameTask: all[0].payload.value.id === task.id };
});

await check('errors', async () => {
  const helper = await client('helper');
  const memo = await client('memo');
  return {
    unknownTask: await refusal(helper.getTask({ id: 'no-such-task' })),
    finishedTask: await refusal(helper.cancelTask({ id: first.id })),
    subscribeFinished: await refusal(helper.resubscribeTask({ id: first.id }).next()),
    messageOnFinishedTask: await refusal(helper.sendMessage({ message: message(['more'], { taskId: first.id }) })),
    unknownContext: await refusal(helper.sendMessage({ message: message(['hi'], { contextId: 'no-such-context' }) })),
    clientManagedTasks: await refusal(memo.getTask({ id: 'x' })),
    clientManagedSend: seen(await memo.sendMessage({ message: message(['hi']) })),
    parse: (await raw('helper', '{not json')).body.error.code,
    method: (await raw('helper', { jsonrpc: '2.0', id: 1, method: 'DoSomething' })).body.error.code,
    legacy: (await raw('helper', { jsonrpc: '2.0', id: 2, method: 'message/send', params: {} })).body.error.code,
    version: (await raw('helper', { jsonrpc: '2.0', id: 3, method: 'GetTask', params: { id: 'x' } }, { 'a2a-version': '0.3' })).body.error.code,
    noVersion: (await raw('helper', { jsonrpc: '2.0', id: 3, method: 'GetTask', params: { id: 'x' } }, { 'a2a-version': '' })).body.error.code,
    extendedCard: (await raw('helper', { jsonrpc: '2.0', id: 5, method: 'GetExtendedAgentCard' })).body.error.code,
    legacyWithVersion: (await raw('helper', { jsonrpc: '2.0', id: 6, method: 'tasks/get', params: { id: 'x' } })).body.error.code,
    notFoundInfo: (await raw('helper', { jsonrpc: '2.0', id: 7, method: 'GetTask', params: { id: 'no-such-task' } })).body.error.data,
    params: (await raw('helper', { jsonrpc: '2.0', id: 4, method: 'SendMessage', params: { message: { role: 'ROLE_USER', parts: [{ text: 1 }] } } })).body.error,
    push: await refusal(helper.sendMessage({ message: message(['hi']), configuration: { taskPushNotificationConfig: { url: 'ftp://127.0.0.1/hook', id: 'p', taskId: '', tenant: '', token: '' } } })),
    modes: await refusal(helper.sendMessage({ message: message(['hi']), configuration: { acceptedOutputModes: ['image/png'] } })),
  };
});

await check('a task lives across its inputs', async () => {
  const ask = await client('ask');
  const asked = await ask.sendMessage({ message: message(['find the file']) });
  const ids = { taskId: asked.id, contextId: asked.contextId };
  const call = data(asked.status.message.parts).awaitingToolExecution[0];
  const again = await ask.sendMessage({
    message: message([{ results: [{ toolCallId: call.id, output: 'found' }] }], ids),
  });
  const waiting = await ask.getTask({ id: asked.id });
  const approval = data(again.status.message.parts).awaitingApproval[0];
  // The task's id alone names it.
  const done = await ask.sendMessage({
    message: message([{ approvals: [{ toolCallId: approval.id, approved: true }] }], { taskId: asked.id }),
  });
  const got = await ask.getTask({ id: asked.id });
  return {
    asked: seen(asked),
    again: seen(again),
    waiting: seen(waiting),
    done: seen(done),
    got: seen(got),
    sameTask: [again, waiting, done, got].map((task) => task.id === asked.id),
  };
});

await check('a task answered with text', async () => {
  const ask = await client('ask');
  const asked = await ask.sendMessage({ message: message(['find it again']) });
  const all = [];
  for await (const event of ask.sendMessageStream({
    message: message(['never mind, say hi'], { taskId: asked.id, contextId: asked.contextId }),
  })) all.push(event);
  const { kinds, answer } = events(all);
  const got = await ask.getTask({ id: asked.id });
  return {
    asked: state(asked),
    first: kinds[0],
    last: kinds[kinds.length - 1],
    answer,
    sameTask: all.every(({ payload }) => (payload.value.taskId ?? payload.value.id) === asked.id),
    got: { ...seen(got), history: JSON.stringify(got.history) },
  };
});

await check('cancel a task that waits for input', async () => {
  const ask = await client('ask');
  const asked = await ask.sendMessage({ message: message(['find a third time']) });
  const canceled = await ask.cancelTask({ id: asked.id });
  const got = await ask.getTask({ id: asked.id });
  return {
    canceled: { ...seen(canceled), sameTask: canceled.id === asked.id },
    got: state(got),
    message: await refusal(ask.sendMessage({ message: message(['go on'], { taskId: asked.id }) })),
    again: await refusal(ask.cancelTask({ id: asked.id })),
    subscribe: await refusal(ask.resubscribeTask({ id: asked.id }).next()),
    next: await (async () => {
      const next = await ask.sendMessage({ message: message(['something else'], { contextId: asked.contextId }) });
      return { ...seen(next), newTask: next.id !== asked.id, sameContext: next.contextId === asked.contextId };
    })(),
  };
});

/** Streams `text` to `slow`, which calls `lookup` once asked to: the task, waiting for input. */
async function slowAsks(slow, text) {
  const all = [];
  let asked = false;
  for await (const event of slow.sendMessageStream({ message: message([text]) })) {
    all.push(event);
    if (!asked) {
      asked = true;
      await fetch(`${base}/ask`, { method: 'POST' });
    }
  }
  const task = all[0].payload.value;
  const call = data(all[all.length - 1].payload.value.status.message.parts).awaitingToolExecution[0];
  const reply = message([{ results: [{ toolCallId: call.id, output: 'found' }] }], {
    taskId: task.id,
    contextId: task.contextId,
  });
  return { task, kinds: events(all).kinds, reply };
}

await check('subscribe to a continuation', async () => {
  const slow = await client('slow');
  const { task, kinds, reply } = await slowAsks(slow, 'look');
  const continuation = slow.sendMessageStream({ message: reply })[Symbol.asyncIterator]();
  await continuation.next();
  const all = await followToTheEnd(slow, task);
  while (!(await continuation.next()).done);
  const followed = events(all);
  const got = await slow.getTask({ id: task.id });
  return {
    asked: kinds[kinds.length - 1],
    first: all[0].payload.$case,
    sameTask: all.every(({ payload }) => (payload.value.taskId ?? payload.value.id) === task.id),
    answer: followed.answer,
    last: followed.kinds[followed.kinds.length - 1],
    got: state(got),
  };
});

await check('cancel a running continuation', async () => {
  const slow = await client('slow');
  const { task, reply } = await slowAsks(slow, 'look again');
  const all = [];
  let canceled;
  for await (const event of slow.sendMessageStream({ message: reply })) {
    all.push(event);
    if (all.length === 2) canceled = await slow.cancelTask({ id: task.id });
  }
  const kinds = events(all).kinds;
  const got = await slow.getTask({ id: task.id });
  return {
    canceled: state(canceled),
    sameTask: canceled.id === task.id,
    last: kinds[kinds.length - 1],
    got: state(got),
  };
});

await check('list tasks', async () => {
  const helper = await client('helper');
  const all = await helper.listTasks({});
  const pageOne = await helper.listTasks({ pageSize: 2 });
  const pageTwo = await helper.listTasks({ pageSize: 2, pageToken: pageOne.nextPageToken });
  const context = await helper.listTasks({ contextId: first.contextId, includeArtifacts: true, historyLength: 0 });
  const completed = await helper.listTasks({ status: 3 /* TASK_STATE_COMPLETED */ });
  const stamps = all.tasks.map((task) => Date.parse(task.status.timestamp));
  return {
    total: all.totalSize,
    count: all.tasks.length,
    pageSize: all.pageSize,
    lastPage: all.nextPageToken,
    newestFirst: stamps.every((stamp, at) => at === 0 || stamps[at - 1] >= stamp),
    listsFirst: all.tasks.some((task) => task.id === first.id),
    noArtifacts: all.tasks.every((task) => task.artifacts.length === 0),
    pageOne: pageOne.tasks.map((task) => task.id).join(',') === all.tasks.slice(0, 2).map((task) => task.id).join(','),
    pageTwo: pageTwo.tasks.map((task) => task.id).join(',') === all.tasks.slice(2, 4).map((task) => task.id).join(','),
    contextTasks: context.tasks.length,
    sameContext: context.tasks.every((task) => task.contextId === first.contextId),
    contextAnswers: context.tasks.map((task) => task.artifacts.map((a) => text(a.parts)).join('|')).reverse(),
    noHistory: context.tasks.every((task) => task.history.length === 0),
    completedOnly: completed.tasks.length > 0 && completed.tasks.every((task) => state(task) === 'TASK_STATE_COMPLETED'),
    clientManaged: await refusal((await client('memo')).listTasks({})),
  };
});

await check('push notifications', async () => {
  const hooked = await client('hooked');
  const task = await hooked.sendMessage({
    message: message(['note this']),
    configuration: {
      acceptedOutputModes: [],
      returnImmediately: false,
      taskPushNotificationConfig: {
        tenant: '', id: 'js-inline', taskId: '', url: `${hooks}/hook/js`, token: 'js-token',
        authentication: { scheme: 'Bearer', credentials: 'js-secret' },
      },
    },
  });
  const config = (id) => ({ tenant: '', taskId: task.id, id });
  const made = await hooked.createTaskPushNotificationConfig({
    ...config('js-made'), url: `${hooks}/hook/js-made`, token: '', authentication: undefined,
  });
  const listed = await hooked.listTaskPushNotificationConfig({ tenant: '', taskId: task.id, pageSize: 0, pageToken: '' });
  const got = await hooked.getTaskPushNotificationConfig(config('js-made'));
  await hooked.deleteTaskPushNotificationConfig(config('js-made'));
  const after = await hooked.listTaskPushNotificationConfig({ tenant: '', taskId: task.id, pageSize: 0, pageToken: '' });
  return {
    id: task.id,
    state: state(task),
    made: made.id,
    listed: listed.configs.map((c) => c.id).sort(),
    got: got.url === `${hooks}/hook/js-made`,
    after: after.configs.map((c) => c.id),
  };
});

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed > 0 ? 1 : 0);

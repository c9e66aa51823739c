// Genkit's own JS client (`genkit/beta/client` 1.42.0: `runFlow`, `streamFlow`) against a bidi
// HTTP server's Genkit flow wire. Usage: node genkit_client.mjs <baseUrl>
//
// What the client does (node_modules/genkit/lib/client/client.mjs):
// - `runFlow` POSTs `{"data": input, "init": init}` (`init` only when given), and returns
//   `result` of a 200 JSON body; any other status throws `Server returned: <status>: <body>`.
// - `streamFlow` POSTs the same with `Accept: text/event-stream`, splits the body on "\n\n",
//   drops the first 6 characters of each record whatever they are (so `data: ` and `error:`
//   both work; comments, `event:`/`id:` lines or CRLF delimiters would break it), and JSON-parses
//   the rest: `message` is a chunk, `result` the output, `error` throws
//   `<status>: <message>\n<details>`. A body that ends without `result` or `error` makes it spin.
//
// Flows the server must serve: /bidi-flow/echo (init: a prefix string; input: a line; one chunk
// per word, output: the number of inputs), /bidi-flow/fail (input: a string; streams "partial",
// then fails with "boom"), /bidi-flow/hello (input: an optional name; output: a greeting) and
// /agent/chat (the examples' chat agent).

import { runFlow, streamFlow } from 'genkit/beta/client';
import { assert, assertJson, check, rejects, run } from './harness.mjs';

// genkit's `streamFlow` reads on after a body that ended without a `result` or `error` record,
// in a loop that never yields to timers (so no timeout can stop it). A streamed 200 body that
// ends is therefore made to fail with an error instead: the client throws it, the check fails.
const realFetch = globalThis.fetch;
globalThis.fetch = async (url, options) => {
  const response = await realFetch(url, options);
  const accept = new Headers(options?.headers).get('accept') ?? '';
  if (response.status !== 200 || !accept.includes('text/event-stream') || !response.body) {
    return response;
  }
  const guard = new TransformStream({
    flush() {
      throw new Error('the stream ended without a result or error record');
    },
  });
  return new Response(response.body.pipeThrough(guard), {
    status: response.status,
    statusText: response.statusText,
    headers: response.headers,
  });
};

/** The status and the JSON body of a `Server returned: <status>: <body>` error. */
function serverError(error) {
  const found = /^Server returned: (\d+): ([\s\S]*)$/.exec(error?.message ?? '');
  assert(found, () => `not a "Server returned" error: ${error?.message ?? error}`);
  let body;
  try {
    body = JSON.parse(found[2]);
  } catch {
    throw new Error(`the error body is not JSON: ${found[2]}`);
  }
  return { status: Number(found[1]), body };
}

/** Checks a refusal: the HTTP status, the callable status, and the details' code and path. */
function assertRefused(error, status, callable, code, path) {
  const { status: got, body } = serverError(error);
  assert(got === status, () => `expected HTTP ${status}, got ${got}: ${JSON.stringify(body)}`);
  assert(body?.error?.status === callable, () => `expected ${callable}: ${JSON.stringify(body)}`);
  assert(error.message.includes(callable), `the message does not name ${callable}`);
  assert(typeof body.error.message === 'string' && body.error.message.length > 0, 'no message');
  if (code !== undefined) {
    assertJson(body.error.details?.code, code, 'details.code');
  }
  if (path !== undefined) {
    assertJson(body.error.details?.path, path, 'details.path');
  }
}

/** Reads a `streamFlow` response: its chunks and its output, or the error it ended with. */
async function drain(response) {
  const chunks = [];
  let error;
  try {
    for await (const chunk of response.stream) {
      chunks.push(chunk);
    }
  } catch (e) {
    error = e;
  }
  if (error !== undefined) {
    const outputError = await rejects(response.output, 'output after a failed stream');
    assert(outputError === error, 'the stream and the output failed with different errors');
    return { chunks, error };
  }
  return { chunks, output: await response.output };
}

await run(async (base) => {
  await check('GET /actions lists echo, fail and chat with their input schemas', async () => {
    const response = await fetch(`${base}/actions`);
    assert(response.status === 200, `status ${response.status}`);
    const actions = await response.json();
    assert(Array.isArray(actions), 'not an array');
    for (const key of ['/bidi-flow/echo', '/bidi-flow/fail', '/agent/chat']) {
      const action = actions.find((a) => a.key === key);
      assert(action, () => `no ${key} in ${JSON.stringify(actions.map((a) => a.key))}`);
      assert(`/${action.type}/${action.name}` === key, () => `${key}: type/name do not match`);
      assert(action.inputSchema && typeof action.inputSchema === 'object', `${key}: no inputSchema`);
    }
  });

  await check('runFlow on /bidi-flow/echo with init returns the output', async () => {
    const output = await runFlow({
      url: `${base}/bidi-flow/echo`,
      input: 'hello brave new world',
      init: '> ',
    });
    assertJson(output, 1, 'output');
  });

  await check('streamFlow on /bidi-flow/echo yields each word in order, then the output', async () => {
    const { chunks, output, error } = await drain(
      streamFlow({ url: `${base}/bidi-flow/echo`, input: 'one two three four', init: '> ' }),
    );
    assert(error === undefined, () => `failed: ${error?.message}`);
    assertJson(chunks, ['> one', '> two', '> three', '> four'], 'chunks');
    assertJson(output, 1, 'output');
  });

  await check('streamFlow on /bidi-flow/echo without init is refused: a missing init is null, not a string', async () => {
    const error = await rejects(
      streamFlow({ url: `${base}/bidi-flow/echo`, input: 'x' }).output,
      'echo without init',
    );
    assertRefused(error, 400, 'INVALID_ARGUMENT', 'invalid_init', '');
  });

  await check('/agent/chat over runFlow then streamFlow keeps the session', async () => {
    const url = `${base}/agent/chat`;
    const first = await runFlow({ url, input: 'hello', init: {} });
    assert(typeof first?.sessionId === 'string' && first.sessionId, 'no sessionId');
    assertJson(first.state, { heard: ['hello'] }, 'first state');
    assertJson(first.output, 1, 'first output');
    const { chunks, output, error } = await drain(
      streamFlow({ url, input: 'again', init: { sessionId: first.sessionId } }),
    );
    assert(error === undefined, () => `failed: ${error?.message}`);
    assert(chunks.length > 1 && chunks.every((c) => typeof c === 'string'), 'chunks: words');
    const text = chunks.join('');
    assert(text.includes('You first said "hello"'), () => `second turn forgot: ${text}`);
    assertJson(output.sessionId, first.sessionId, 'second sessionId');
    assertJson(output.state, { heard: ['hello', 'again'] }, 'second state');
  });

  await check('/agent/chat over streamFlow then runFlow keeps the session', async () => {
    const url = `${base}/agent/chat`;
    const { chunks, output: first, error } = await drain(
      streamFlow({ url, input: 'bonjour', init: {} }),
    );
    assert(error === undefined, () => `failed: ${error?.message}`);
    assert(chunks.join('').includes('Nice to meet you'), () => `first turn: ${chunks.join('')}`);
    assert(typeof first?.sessionId === 'string' && first.sessionId, 'no sessionId');
    const second = await runFlow({ url, input: 'encore', init: { sessionId: first.sessionId } });
    assertJson(second.sessionId, first.sessionId, 'second sessionId');
    assertJson(second.state, { heard: ['bonjour', 'encore'] }, 'second state');
  });

  await check('/agent/chat without a sessionId starts a new session each time', async () => {
    const url = `${base}/agent/chat`;
    const a = await runFlow({ url, input: 'first', init: {} });
    const b = await runFlow({ url, input: 'second', init: {} });
    assert(a.sessionId !== b.sessionId, 'the same sessionId twice');
    assertJson(b.state, { heard: ['second'] }, 'new session state');
  });

  await check('runFlow on an unknown flow throws NOT_FOUND', async () => {
    const error = await rejects(
      runFlow({ url: `${base}/bidi-flow/no-such-flow`, input: 'x', init: '> ' }),
      'unknown flow',
    );
    assertRefused(error, 404, 'NOT_FOUND');
  });

  await check('streamFlow on an unknown flow throws NOT_FOUND', async () => {
    const { chunks, error } = await drain(
      streamFlow({ url: `${base}/agent/no-such-agent`, input: 'x', init: {} }),
    );
    assertJson(chunks, [], 'chunks');
    assertRefused(error, 404, 'NOT_FOUND');
  });

  await check('runFlow with an input of the wrong type throws INVALID_ARGUMENT at the root', async () => {
    const error = await rejects(
      runFlow({ url: `${base}/bidi-flow/echo`, input: 42, init: '> ' }),
      'wrong input type',
    );
    assertRefused(error, 400, 'INVALID_ARGUMENT', 'invalid_input', '');
  });

  await check('streamFlow with an init of the wrong type throws INVALID_ARGUMENT at its path', async () => {
    const { chunks, error } = await drain(
      streamFlow({ url: `${base}/agent/chat`, input: 'hi', init: { sessionId: 7 } }),
    );
    assertJson(chunks, [], 'chunks');
    assertRefused(error, 400, 'INVALID_ARGUMENT', 'invalid_init', '/sessionId');
  });

  await check('streamFlow on a flow failing mid-stream yields "partial", then throws "boom"', async () => {
    const { chunks, error } = await drain(
      streamFlow({ url: `${base}/bidi-flow/fail`, input: 'go' }),
    );
    assertJson(chunks, ['partial'], 'chunks');
    assert(error instanceof Error, () => `expected an error, got ${error}`);
    assert(error.message.includes('boom'), () => `the error does not say boom: ${error.message}`);
    // The client prints `<status>: <message>\n<details>`: details are text, not an object.
    assert(error.message.startsWith('INTERNAL: '), () => `no status first: ${error.message}`);
    assert(!error.message.includes('[object Object]'), () => `details unprintable: ${error.message}`);
  });

  await check('runFlow with no input runs the flow with no input, as Genkit servers do', async () => {
    const output = await runFlow({ url: `${base}/bidi-flow/hello` });
    assertJson(output, 'hello, world', 'output');
    assertJson(await runFlow({ url: `${base}/bidi-flow/hello`, input: 'Ada' }), 'hello, Ada', 'named');
  });

  await check('an agent init with a field it does not know (threadId) is refused, not ignored', async () => {
    const error = await rejects(
      runFlow({ url: `${base}/agent/chat`, input: 'hi', init: { threadId: 'snap-1' } }),
      'unknown init field',
    );
    assertRefused(error, 400, 'INVALID_ARGUMENT', 'invalid_init', '/threadId');
  });

  await check('an agent init at a snapshot that does not exist is NOT_FOUND, never a new session', async () => {
    const error = await rejects(
      runFlow({ url: `${base}/agent/chat`, input: 'hi', init: { snapshotId: 'snap-1' } }),
      'unknown snapshot',
    );
    const { status, body } = serverError(error);
    assert(status === 404 && body?.error?.status === 'NOT_FOUND', () => JSON.stringify(body));
  });

  await check('runFlow on a failing flow throws "boom"', async () => {
    const error = await rejects(runFlow({ url: `${base}/bidi-flow/fail`, input: 'go' }), 'fail');
    assert(error.message.includes('boom'), () => `the error does not say boom: ${error.message}`);
    serverError(error);
  });
});

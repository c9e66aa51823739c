// @ag-ui/client 1.0.0's HttpAgent reads recorded AG-UI streams: every `NAME.sse` of a directory
// (SSE, one `data: {json}` record per event) is served by a tiny local HTTP server and run once,
// and must be accepted: HttpAgent checks each event against @ag-ui/core's schemas and the
// sequencing rules (`verifyEvents`), and a stream it refuses makes `runAgent` throw. `NAME.json`
// says how the run must end: {"threadId", "runId", "outcome": "success" | "cancelled" | "error",
// "pending": [tool call ids]}.
// Usage: node agui_verify.mjs <dir>. Prints `ok - NAME` per stream, then `N passed, M failed`.

import http from 'node:http';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { HttpAgent } from '@ag-ui/client';
import { assert, assertJson, describe } from './harness.mjs';

const dir = process.argv[2];
if (!dir) {
  console.log(`not ok - usage: node ${process.argv[1]} <dir>`);
  console.log('0 passed, 1 failed');
  process.exit(2);
}

const names = (await readdir(dir)).filter((name) => name.endsWith('.sse')).sort();
const server = http.createServer(async (req, res) => {
  for await (const _ of req); // The RunAgentInput: read and dropped.
  try {
    const body = await readFile(join(dir, decodeURIComponent(req.url.slice(1))));
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.end(body);
  } catch {
    res.writeHead(404);
    res.end();
  }
});
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const base = `http://127.0.0.1:${server.address().port}`;

// The client logs what it refuses before it throws: the failure line says it already.
console.error = () => {};

let passed = 0;
let failed = 0;
for (const name of names) {
  try {
    const expected = JSON.parse(await readFile(join(dir, name.replace(/\.sse$/, '.json')), 'utf8'));
    const agent = new HttpAgent({ url: `${base}/${name}`, threadId: expected.threadId });
    let finished;
    let errored;
    await agent.runAgent(
      { runId: expected.runId },
      {
        onRunFinishedEvent: (params) => {
          finished = params;
        },
        onRunErrorEvent: ({ event }) => {
          errored = event;
        },
      },
    );
    if (expected.outcome === 'error') {
      assert(errored !== undefined, 'no RUN_ERROR reached the subscriber');
      assert(finished === undefined, 'RUN_FINISHED after RUN_ERROR');
    } else {
      assert(errored === undefined, () => `RUN_ERROR: ${errored.message}`);
      assert(finished !== undefined, 'no RUN_FINISHED reached the subscriber');
      assert(finished.outcome === expected.outcome, () => `outcome ${finished.outcome}`);
      if (expected.outcome === 'success') {
        assertJson([...(finished.pendingToolCallIds ?? [])].sort(), [...expected.pending].sort(), 'pending tool calls');
      }
    }
    passed += 1;
    console.log(`ok - ${name}`);
  } catch (error) {
    failed += 1;
    console.log(`not ok - ${name}: ${describe(error)}`);
  }
}
server.close();
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed > 0 ? 1 : 0);

// Feeds every UI message stream in a directory (files `*.sse`, written by the tests package's
// `vercel_client` test from generated agent runs) to the AI SDK's own reader: each chunk through
// `parseJsonEventStream` with `uiMessageChunkSchema`, the chunks through `readUIMessageStream`.
// A stream passes when every chunk validates and the reader reads it to its end with no error but
// those of the stream's own `error` chunks. Prints `N passed, M failed`.
//
// Usage: node vercel_streams.mjs <dir>

import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseJsonEventStream, readUIMessageStream, uiMessageChunkSchema } from 'ai';

import { describe } from './harness.mjs';

/** Reads one encoded stream; throws what the client would have rejected. */
async function read(bytes) {
  const body = new Response(bytes).body;
  const errorTexts = [];
  const chunks = parseJsonEventStream({ stream: body, schema: uiMessageChunkSchema }).pipeThrough(
    new TransformStream({
      transform(result, controller) {
        if (!result.success) throw result.error;
        if (result.value.type === 'error') errorTexts.push(result.value.errorText);
        controller.enqueue(result.value);
      },
    }),
  );
  const errors = [];
  let last;
  for await (const message of readUIMessageStream({ stream: chunks, onError: (e) => errors.push(e) })) {
    last = message;
  }
  for (const error of errors) {
    // An `error` chunk reaches `onError` as a plain Error with its text; anything else is the
    // client refusing the stream.
    if (error?.name !== 'Error' || !errorTexts.includes(error.message)) throw error;
  }
  if (last === undefined) throw new Error('no message');
  for (const part of last.parts) {
    if ((part.type === 'text' || part.type === 'reasoning') && part.state !== 'done') {
      throw new Error(`a ${part.type} part left ${part.state}`);
    }
    if (part.type.startsWith('tool-') && part.state === 'input-streaming') {
      throw new Error(`tool part ${part.toolCallId} left input-streaming`);
    }
  }
  return last;
}

const dir = process.argv[2];
let passed = 0;
let failed = 0;
const files = (await readdir(dir)).filter((name) => name.endsWith('.sse')).sort();
for (const name of files) {
  try {
    await read(await readFile(join(dir, name)));
    passed += 1;
  } catch (error) {
    failed += 1;
    console.log(`not ok - ${name}: ${describe(error)}`);
  }
}
if (files.length === 0) {
  failed += 1;
  console.log(`not ok - no streams in ${dir}`);
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed > 0 ? 1 : 0);

// A plain `fetch` load client for Genkit's streaming flow wire, the same for every server.
//
//   node load.mjs <url> <requests> <concurrency> <chunksPerRequest> [--warmup=W]
//
// Sends <requests> POSTs of `{"data":{"n":<chunksPerRequest>}}` with
// `Accept: text/event-stream`, <concurrency> at a time (one keep-alive connection each), reads
// every record of each body (split on "\n\n", the `data: ` or `error:` prefix dropped, the rest
// parsed as JSON), and counts a request as an error unless it answered 200 with exactly n
// `message` records `{"i":0}`, `{"i":1}`, … then `{"result":n}`. W requests (default: the
// concurrency) run first and are not measured. Prints one JSON line:
// {requests, seconds, requestsPerSec, chunksPerSec, errors, concurrency, chunksPerRequest, warmup}
// where requests and errors count the measured requests and chunks/s counts the chunks of the
// requests without error. The first error is printed to stderr.

const [url, requestsArg, concurrencyArg, chunksArg, ...flags] = process.argv.slice(2);
const requests = Number(requestsArg);
const concurrency = Number(concurrencyArg);
const n = Number(chunksArg);
const warmupFlag = flags.find((f) => f.startsWith('--warmup='));
const warmup = warmupFlag ? Number(warmupFlag.split('=')[1]) : concurrency;
const counts = [requests, concurrency, n, warmup];
if (!/^https?:\/\//.test(url ?? '') || counts.some((v) => !Number.isInteger(v) || v < 0) || concurrency < 1) {
  console.error('usage: node load.mjs <url> <requests> <concurrency> <chunksPerRequest> [--warmup=W]');
  process.exit(2);
}

const body = JSON.stringify({ data: { n } });
const DELIMITER = '\n\n';
let firstError = null;

/** One request: resolves to null, or to what was wrong. */
async function one() {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Accept: 'text/event-stream' },
    body,
  });
  if (response.status !== 200) {
    return `HTTP ${response.status}: ${(await response.text()).slice(0, 300)}`;
  }
  const decoder = new TextDecoder();
  let buffer = '';
  let next = 0;
  let result;
  for await (const bytes of response.body) {
    buffer += decoder.decode(bytes, { stream: true });
    let start = 0;
    for (let end = buffer.indexOf(DELIMITER); end !== -1; end = buffer.indexOf(DELIMITER, start)) {
      const record = buffer.slice(start, end);
      start = end + DELIMITER.length;
      if (result !== undefined) return `a record after the result: ${record.slice(0, 200)}`;
      if (!record.startsWith('data: ')) return `not a data record: ${record.slice(0, 200)}`;
      const parsed = JSON.parse(record.slice(6));
      if ('message' in parsed) {
        if (parsed.message?.i !== next) return `chunk ${next}: ${JSON.stringify(parsed.message)}`;
        next += 1;
      } else if ('result' in parsed) {
        result = parsed.result;
      } else {
        return `record ${JSON.stringify(parsed).slice(0, 300)}`;
      }
    }
    buffer = buffer.slice(start);
  }
  buffer += decoder.decode();
  if (buffer.length > 0) return `trailing bytes: ${buffer.slice(0, 200)}`;
  if (next !== n) return `${next} chunks, expected ${n}`;
  if (result !== n) return `result ${JSON.stringify(result)}, expected ${n}`;
  return null;
}

/** Runs `total` requests, `concurrency` at a time; returns the number of errors. */
async function batch(total) {
  let started = 0;
  let errors = 0;
  async function worker() {
    while (started < total) {
      started += 1;
      let problem;
      try {
        problem = await one();
      } catch (error) {
        problem = error?.cause?.message ?? error?.message ?? String(error);
      }
      if (problem !== null) {
        errors += 1;
        firstError ??= problem;
      }
    }
  }
  await Promise.all(Array.from({ length: Math.min(concurrency, Math.max(total, 1)) }, worker));
  return errors;
}

await batch(warmup);
firstError = null;
const begin = process.hrtime.bigint();
const errors = await batch(requests);
const seconds = Number(process.hrtime.bigint() - begin) / 1e9;
if (firstError !== null) console.error(`first error: ${firstError}`);
const round = (x) => Math.round(x * 10) / 10;
console.log(
  JSON.stringify({
    requests,
    seconds: Math.round(seconds * 1000) / 1000,
    requestsPerSec: round(requests / seconds),
    chunksPerSec: round(((requests - errors) * n) / seconds),
    errors,
    concurrency,
    chunksPerRequest: n,
    warmup,
  }),
);
process.exit(errors > 0 ? 1 : 0);

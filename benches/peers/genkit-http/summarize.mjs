// Medians of a vs-bidi.sh output as a Markdown table, one row per client and configuration:
//
//   node summarize.mjs results/vs-bidi.txt
//
// Columns: requests/s of each server (bidi, axum, genkit, raw), chunks/s of bidi and genkit
// (requests/s times chunks/request), then bidi / genkit and bidi / axum. Exits 1 if any run had
// an error.

import { readFileSync } from 'node:fs';

const file = process.argv[2];
if (file === undefined) {
  console.error('usage: node summarize.mjs <vs-bidi.sh output>');
  process.exit(2);
}
const runs = new Map();
let errors = 0;
for (const line of readFileSync(file, 'utf8').split('\n')) {
  if (line.trim() === '') continue;
  const [server, client, requests, concurrency, chunks, ...rest] = line.split(' ');
  const result = JSON.parse(rest.join(' '));
  errors += result.errors;
  const key = [client, requests, concurrency, chunks].join(' ');
  if (!runs.has(key)) runs.set(key, new Map());
  const byServer = runs.get(key);
  if (!byServer.has(server)) byServer.set(server, []);
  byServer.get(server).push(result);
}
const median = (xs) => {
  const sorted = [...xs].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
};
const servers = ['bidi', 'axum', 'genkit', 'raw'];
const fmt = (x) => (Number.isFinite(x) ? Math.round(x).toLocaleString('en-US') : '—');
console.log(
  `| client | requests | concurrency | chunks/request | ${servers.map((s) => `${s} req/s`).join(' | ')} | bidi chunks/s | genkit chunks/s | bidi / genkit | bidi / axum |`,
);
console.log(`|---|${'---:|'.repeat(3 + servers.length + 4)}`);
for (const [key, byServer] of runs) {
  const rps = servers.map((s) => median((byServer.get(s) ?? []).map((r) => r.requestsPerSec)));
  const cps = servers.map((s) => median((byServer.get(s) ?? []).map((r) => r.chunksPerSec)));
  const ratio = (a, b) => (Number.isFinite(a / b) ? `${(a / b).toFixed(1)}×` : '—');
  console.log(
    `| ${key.split(' ').join(' | ')} | ${rps.map(fmt).join(' | ')} | ${fmt(cps[0])} | ${fmt(cps[2])} | ${ratio(rps[0], rps[2])} | ${ratio(rps[0], rps[1])} |`,
  );
}
process.exit(errors > 0 ? 1 : 0);

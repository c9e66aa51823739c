// A tiny test runner for the peer client scripts: each check prints `ok - name` or
// `not ok - name: why`, the run ends with the line `N passed, M failed`, and the exit code is
// non-zero if anything failed or threw.
//
// genkit 1.42's client leaves an unhandled promise rejection behind when a stream fails (its
// `Channel` rejects a promise nobody awaits). A check that expects an error passes it through
// `rejects`, which remembers it; an unhandled rejection of an error a check saw is reported as a
// `#` comment, any other one counts as a failure.

import { inspect } from 'node:util';

const CHECK_TIMEOUT_MS = Number(process.env.BIDI_NODE_CHECK_TIMEOUT_MS ?? 120_000);

let passed = 0;
let failed = 0;
const unhandled = [];
const seen = new WeakSet();

process.on('unhandledRejection', (reason) => unhandled.push(reason));
process.on('uncaughtException', (error) => {
  failed += 1;
  console.log(`not ok - uncaught exception: ${describe(error)}`);
});

/** A one-line description of an error or value. */
export function describe(error) {
  const text = error instanceof Error ? error.message : inspect(error, { depth: 4 });
  return text.replace(/\s*\n\s*/g, ' | ');
}

/** Throws unless `condition`, with `message` (a string or a function making one). */
export function assert(condition, message) {
  if (!condition) {
    throw new Error(typeof message === 'function' ? message() : message);
  }
}

/** Throws unless `actual` and `expected` are the same JSON. */
export function assertJson(actual, expected, what) {
  const a = JSON.stringify(actual);
  const e = JSON.stringify(expected);
  assert(a === e, () => `${what}: expected ${e}, got ${a}`);
}

/** Awaits `promise`, which must reject; returns (and remembers) the error. */
export async function rejects(promise, what) {
  let value;
  try {
    value = await promise;
  } catch (error) {
    if (error !== null && typeof error === 'object') seen.add(error);
    return error;
  }
  throw new Error(`${what}: expected a rejection, got ${JSON.stringify(value)}`);
}

/** Rejects after `ms` milliseconds, naming `what`. */
export function timeout(ms, what) {
  let timer;
  const promise = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
  });
  promise.catch(() => {});
  return { promise, cancel: () => clearTimeout(timer) };
}

/** Runs one check (an async function), printing its result. Never throws. */
export async function check(name, fn) {
  const limit = timeout(CHECK_TIMEOUT_MS, name);
  try {
    await Promise.race([fn(), limit.promise]);
    passed += 1;
    console.log(`ok - ${name}`);
  } catch (error) {
    failed += 1;
    console.log(`not ok - ${name}: ${describe(error)}`);
  } finally {
    limit.cancel();
  }
}

/**
 * Runs `main(baseUrl)` with the base URL from the command line, then prints the summary and
 * exits (which also stops anything a timed-out check left running).
 */
export async function run(main) {
  const baseUrl = process.argv[2]?.replace(/\/+$/, '');
  if (!baseUrl || !/^https?:\/\//.test(baseUrl)) {
    console.log(`not ok - usage: node ${process.argv[1]} <baseUrl> (http://host:port)`);
    console.log('0 passed, 1 failed');
    process.exit(2);
  }
  try {
    await main(baseUrl);
  } catch (error) {
    failed += 1;
    console.log(`not ok - the script threw: ${describe(error)}`);
  }
  // Let pending rejections surface before counting them.
  await new Promise((resolve) => setTimeout(resolve, 50));
  for (const reason of unhandled) {
    if (reason !== null && typeof reason === 'object' && seen.has(reason)) {
      console.log(`# unhandled rejection of an error a check handled: ${describe(reason)}`);
    } else {
      failed += 1;
      console.log(`not ok - unhandled rejection: ${describe(reason)}`);
    }
  }
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed > 0 ? 1 : 0);
}

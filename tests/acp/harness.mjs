// A tiny test runner for the ACP peer scripts: each check prints `ok - name` or
// `not ok - name: why`, the run ends with the line `N passed, M failed`, and the exit code is
// non-zero if anything failed or threw.

import { inspect } from 'node:util';

const CHECK_TIMEOUT_MS = Number(process.env.BIDI_ACP_CHECK_TIMEOUT_MS ?? 120_000);

let passed = 0;
let failed = 0;

process.on('unhandledRejection', (reason) => {
  failed += 1;
  console.log(`not ok - unhandled rejection: ${describe(reason)}`);
});
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

/** Runs one check (an async function), printing its result; returns its value or undefined. */
export async function check(name, fn) {
  let timer;
  const limit = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${CHECK_TIMEOUT_MS} ms`)), CHECK_TIMEOUT_MS);
  });
  try {
    const value = await Promise.race([fn(), limit]);
    passed += 1;
    console.log(`ok - ${name}`);
    return value;
  } catch (error) {
    failed += 1;
    console.log(`not ok - ${name}: ${describe(error)}`);
    return undefined;
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Runs `main(agent, dir)` with the agent binary and a scratch directory from the command line,
 * then prints the summary and exits (which also stops anything a timed-out check left running).
 */
export async function run(main) {
  const [agent, dir] = process.argv.slice(2);
  if (!agent || !dir) {
    console.log(`not ok - usage: node ${process.argv[1]} <agent-binary> <scratch-dir>`);
    console.log('0 passed, 1 failed');
    process.exit(2);
  }
  try {
    await main(agent, dir);
  } catch (error) {
    failed += 1;
    console.log(`not ok - the script threw: ${describe(error)}`);
  }
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed > 0 ? 1 : 0);
}

// A minimal sequential test harness for the node test files. Each test prints one line,
// "ok - NAME" or "not ok - NAME: REASON", like the shell files, so run.sh counts both alike.
// Every test is bounded by a timeout; cleanup hooks run on exit and on SIGTERM/SIGINT.

const cleanups = [];
let passed = 0;
let failed = 0;

export function onCleanup(fn) {
  cleanups.push(fn);
}

async function runCleanups() {
  while (cleanups.length) {
    const fn = cleanups.pop();
    try {
      await fn();
    } catch (e) {
      console.log(`# cleanup: ${e && e.message}`);
    }
  }
}

for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, async () => {
    failed++; // stopped from outside (the file timeout): keep the logs
    await runCleanups();
    process.exit(143);
  });
}

export function failures() {
  return failed;
}

export function diag(...lines) {
  for (const l of lines.join(' ').split('\n')) console.log(`# ${l}`);
}

function oneLine(s) {
  return String(s).replace(/\s+/g, ' ').slice(0, 600);
}

export function pass(name) {
  passed++;
  console.log(`ok - ${name}`);
}

export function failTest(name, reason) {
  failed++;
  console.log(`not ok - ${name}: ${oneLine(reason)}`);
}

// test(name, async fn, {timeout}): runs fn; a throw or the timeout fails the test.
export async function test(name, fn, { timeout = 20000 } = {}) {
  let timer;
  const t = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${timeout} ms`)), timeout);
  });
  try {
    await Promise.race([fn(), t]);
    pass(name);
    return true;
  } catch (e) {
    failTest(name, e && e.message ? e.message : e);
    return false;
  } finally {
    clearTimeout(timer);
  }
}

// finish(): runs cleanups, exits non-zero when a test failed.
export async function finish() {
  await runCleanups();
  process.exit(failed ? 1 : 0);
}

export function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

export function assertEq(actual, expected, what) {
  const a = JSON.stringify(actual);
  const e = JSON.stringify(expected);
  if (a !== e) throw new Error(`${what}: expected ${e}, got ${a && a.length > 400 ? a.slice(0, 400) + '...' : a}`);
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Connection flood and slowloris while a legitimate client measures its latency. opsd runs with
// tokens and a simulator; N hostile connections are held open (reopened at once when opsd
// closes one, as an attacker would): half-open HTTP heads trickling a header line every 10 s,
// WebSocket upgrades without a token, and idle sockets that send nothing. Meanwhile a client
// with a valid token sends GET /api/v1/status every 50 ms, each on a new connection (as curl
// would), and a live WebSocket subscriber counts its updates; a new subscriber connects in the
// middle of the flood.
//
//   node bench/fault/flood.mjs [--conns 300] [--hold-s 15] [--kinds head,ws,idle] [--target-ms 100]
//
// Target (issue "Reliability"): with 2,000 hostile connections held open, /api/v1/status
// answers in under 100 ms (checked on the p99 of a client in a process of its own,
// probe.mjs; the same client inside the attacker's process is reported beside it; every
// request must be answered), the subscriber
// keeps getting updates and a new one is served. opsd starts with a soft RLIMIT_NOFILE of
// FAULT_OPSD_NOFILE (default 1024, the usual default of a service); the client needs about
// N + 100 descriptors (run.sh raises its limit). --target-ms: the p99 bound (100 ms, the
// issue's target for a Release build; run.sh gives a sanitizer build 500 ms).
import net from 'node:net';
import { randomBytes } from 'node:crypto';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Daemon, workDir, port, request, sleep, check, diag, finish, parseArgs, summary, fmt, pollStatus } from './lib.mjs';
import { Client } from '../../tests/integration/lib/opsd.mjs';

const args = parseArgs();
const N = Number(args.conns || 300);
const HOLD_S = Number(args['hold-s'] || 15);
const KINDS = String(args.kinds || 'head,ws,idle').split(',');
const NOFILE = Number(process.env.FAULT_OPSD_NOFILE || 1024);
const TARGET_MS = Number(args['target-ms'] || 100);
const VIEW = { Authorization: 'Bearer flood-view' };

const dir = workDir('flood');
const p = await port();
const d = new Daemon({
  dir, port: p, nofile: NOFILE, config: `server:
  listen: 127.0.0.1:${p}
  data_dir: ${dir}/data
  auth:
    tokens:
      - {name: viewer, token: flood-view, role: viewer}
      - {name: ops, token: flood-ops, role: operator}
drivers:
  - type: simulator
    name: plant
    points:
      - {name: "tank1-{000..099}", type: double, pattern: sine, period: 200ms, min: 0, max: 100}
`,
});

// Hostile connections. Each slot keeps one connection open; when opsd closes it, the slot
// reopens after 100 ms. Counts per kind: opened, closed by opsd, connect errors.
const stats = Object.fromEntries(KINDS.map((k) => [k, { opened: 0, closedByServer: 0, errors: 0, open: 0 }]));
const sockets = new Set();
let flooding = true;
function hostile(kind) {
  if (!flooding) return;
  const s = net.connect({ host: '127.0.0.1', port: p });
  const st = stats[kind];
  let connected = false;
  let trickle = null;
  sockets.add(s);
  s.setNoDelay(true);
  s.on('connect', () => {
    connected = true;
    st.opened++;
    st.open++;
    if (kind === 'head') {
      s.write('GET /api/v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\n');
      trickle = setInterval(() => s.write(`X-Slow-${Math.floor(Math.random() * 1e6)}: 1\r\n`), 10000);
    } else if (kind === 'ws') {
      s.write(`GET /api/v1/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
        `Sec-WebSocket-Key: ${randomBytes(16).toString('base64')}\r\nSec-WebSocket-Version: 13\r\n\r\n`);
    }
  });
  s.on('data', () => { /* read and ignore: the attacker does not answer */ });
  s.on('error', () => {
    if (!connected) st.errors++;
  });
  s.on('close', () => {
    clearInterval(trickle);
    sockets.delete(s);
    if (connected) {
      st.open--;
      if (flooding) st.closedByServer++;
    }
    if (flooding) setTimeout(() => hostile(kind), connected ? 100 : 500);
  });
}

// The live subscriber: gaps between its updates.
async function subscriber(tag) {
  const c = await Client.connect(`${d.wsUrl}?token=flood-view`);
  c.send({ op: 'subscribe', id: tag, prefix: 'tank1-', interval: 200 });
  return c;
}
function gaps(c, from, to) {
  const ts = c.msgs.filter((m) => m.op === 'update' && m._t >= from && m._t <= to).map((m) => m._t);
  let max = 0;
  let prev = from;
  for (const t of [...ts, to]) {
    max = Math.max(max, t - prev);
    prev = t;
  }
  return { updates: ts.length, maxGap: max };
}

// GET /api/v1/status every 50 ms on a new connection, for ms: latencies and failures.
async function measure(ms) {
  const r = await pollStatus(d, VIEW, ms);
  return { ...summary(r.lat), fails: r.fails };
}

// The same client in a process of its own (probe.mjs), for ms.
function probe(ms) {
  const script = fileURLToPath(new URL('./probe.mjs', import.meta.url));
  return new Promise((resolve) => {
    execFile(process.execPath, [script, String(p), 'flood-view', String(ms)], { timeout: ms + 30000 }, (err, out) => {
      try {
        const r = JSON.parse(out);
        resolve({ ...summary(r.lat), fails: r.fails });
      } catch {
        resolve({ n: 0, p50: NaN, p99: NaN, max: NaN, fails: [`probe failed: ${err ? err.message : out}`] });
      }
    });
  });
}

try {
  await d.start();
  const sub = await subscriber('s1');
  await sleep(1000);
  const base = await measure(5000);
  diag(`baseline: /api/v1/status p50 ${fmt(base.p50)} ms, p99 ${fmt(base.p99)} ms, max ${fmt(base.max)} ms (${base.n} requests)`);

  // Open the hostile connections, 100 at a time.
  const tOpen = Date.now();
  for (let i = 0; i < N; i++) {
    hostile(KINDS[i % KINDS.length]);
    if (i % 100 === 99) await sleep(50);
  }
  await sleep(2000);
  const heldAtStart = Object.values(stats).reduce((a, s) => a + s.open, 0);
  diag(`${N} hostile connections (${KINDS.join(', ')}) opened in ${Date.now() - tOpen - 2000} ms; ${heldAtStart} open 2 s later; opsd soft RLIMIT_NOFILE ${NOFILE}`);

  const t0 = Date.now();
  const during = measure(HOLD_S * 1000);
  const separate = probe(HOLD_S * 1000);
  await sleep((HOLD_S * 1000) / 2);
  let fresh = null;
  let freshWhy = '';
  const tf = Date.now();
  try {
    const c = await subscriber('s2');
    await c.update('s2', 5000);
    fresh = Date.now() - tf;
    c.close();
  } catch (e) {
    freshWhy = e.message;
  }
  const lat = await during;
  const sep = await separate;
  const t1 = Date.now();
  const g = gaps(sub, t0, t1);
  const heldAtEnd = Object.values(stats).reduce((a, s) => a + s.open, 0);
  const health = await request(d, 'GET', '/healthz', undefined, {}, 5000).catch((e) => ({ status: 0, text: e.message }));
  for (const [k, s] of Object.entries(stats)) diag(`hostile ${k}: opened ${s.opened}, closed by opsd ${s.closedByServer}, connect errors ${s.errors}, open at the end ${s.open}`);
  diag(`during the flood (${HOLD_S} s, ${heldAtEnd} hostile connections open at the end): /api/v1/status p50 ${fmt(lat.p50)} ms, p99 ${fmt(lat.p99)} ms, max ${fmt(lat.max)} ms, ${lat.n} answered, ${lat.fails.length} failed`);
  diag(`the same client in a process of its own: p50 ${fmt(sep.p50)} ms, p99 ${fmt(sep.p99)} ms, max ${fmt(sep.max)} ms, ${sep.n} answered, ${sep.fails.length} failed`);
  diag(`subscriber: ${g.updates} updates, longest gap ${g.maxGap} ms; new subscriber's first update after ${fresh === null ? '-' : fresh} ms`);
  diag(`| hostile connections | kinds | held open at the end | status p50 / p99 / max ms (separate process) | (attacker's process) | failed | subscriber longest gap ms | new subscriber ms |`);
  diag(`| ${N} | ${KINDS.join(', ')} | ${heldAtEnd} | ${fmt(sep.p50)} / ${fmt(sep.p99)} / ${fmt(sep.max)} | ${fmt(lat.p50)} / ${fmt(lat.p99)} / ${fmt(lat.max)} | ${sep.fails.length + lat.fails.length} / ${sep.n + lat.n + sep.fails.length + lat.fails.length} | ${g.maxGap} | ${fresh === null ? `none (${freshWhy.slice(0, 60)})` : fresh} |`);

  const tag = `flood ${N} (${KINDS.join(',')})`;
  const fails = [...sep.fails, ...lat.fails];
  check(`${tag}: every /api/v1/status request answered 200 during the flood`, fails.length === 0,
    `${fails.length} of ${sep.n + lat.n + fails.length} failed (first: ${fails.slice(0, 2).join('; ')})`);
  check(`${tag}: /api/v1/status p99 under ${TARGET_MS} ms during the flood (p99 ${fmt(sep.p99)} ms)`, sep.n > 0 && sep.p99 < TARGET_MS,
    `p50 ${fmt(sep.p50)} ms, p99 ${fmt(sep.p99)} ms, max ${fmt(sep.max)} ms over ${sep.n} answers`);
  check(`${tag}: the live subscriber kept getting updates (longest gap ${g.maxGap} ms)`, g.updates > 0 && g.maxGap < 2000,
    `${g.updates} updates, longest gap ${g.maxGap} ms (interval 200 ms)`);
  check(`${tag}: a new subscriber with a valid token gets its first update within 5 s`, fresh !== null && fresh <= 5000,
    freshWhy || `connected and first update after ${fresh} ms`);
  check(`${tag}: /healthz answers during the flood`, health.status === 200, `${health.status} ${health.text}`);
  flooding = false;
  for (const s of sockets) s.destroy();
  sub.close();
  await sleep(500);
  const after = await measure(1000);
  check(`${tag}: opsd answers once the flood is gone`, after.fails.length === 0 && after.n > 0, after.fails.join('; '));
  const st = await d.stop('SIGTERM', 15000);
  check(`${tag}: a clean stop at the end (exit 0)`, st && st.code === 0 && !st.killed, JSON.stringify(st));
  const rep = d.sanitizerReport();
  check(`${tag}: no sanitizer report in the log`, !rep, rep);
} catch (e) {
  check('flood: harness ran to the end', false, `${e.message}; log: ${d.logTail(300)}`);
}
flooding = false;
for (const s of sockets) s.destroy();
await finish();

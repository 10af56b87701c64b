#!/usr/bin/env node
// bench/cluster/run.mjs - three opsd nodes on NATS JetStream on this machine (docs/cluster.md):
// three nats-server processes clustered on loopback (as scripts/cluster.sh starts them) and
// three opsd nodes a, b, c.
//
//   mirror    node a owns the driver `plant` (POINTS simulated points changing every PERIOD);
//             b and c apply a's live batches. Over a window: the values b applied per second
//             (opsd_cluster_live_values_total{dir="in"}) and b's CPU (utime+stime of its
//             process), so the CPU per million mirrored values (b has no client then).
//   cross     WebSocket clients (bench_ws_client, CLIENTS of them, every point each) on b:
//             values/s delivered and the latency from source time to receipt, p50/p99.
//   local     the same clients on a (the node that owns the points: one node's figure, in
//             the same run and the same load); cross minus local is what the cluster adds.
//   failover  KILLS rounds: kill -9 of the owner of the unit `fo` (any node), time until a
//             surviving node reports another owner (GET /api/v1/cluster every 50 ms), then
//             the killed node is started again and heard before the next round. p50/p99.
//
// Prints one table and the targets of the issue checked (1 M mirrored values/s at <= 0.25
// core per million, cross-node p99 + <= 50 ms, failover p99 <= lease + 2 s).
//
// Usage: node bench/cluster/run.mjs [--quick] [--build DIR] [--points N] [--period MS]
//        [--clients N] [--kills N] [--window S] [--port FIRST]
//   --quick    short windows and 5 kills (the long form: 20 kills)
//   --build    the folder with a Release opsd and bench/bench_ws_client (default build-bench)
//   --port     first of the loopback ports used (default 21400; 3 x 3 NATS ports, 3 opsd)
// Every process started here is stopped on exit.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, writeFileSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const args = process.argv.slice(2);
const opt = (name, def) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : def;
};
const QUICK = args.includes('--quick');
const BUILD = resolve(opt('--build', 'build-bench'));
const POINTS = +opt('--points', 50000);
const PERIOD = +opt('--period', 100);
const CLIENTS = +opt('--clients', 2);
const KILLS = +opt('--kills', QUICK ? 5 : 20);
const WINDOW = +opt('--window', QUICK ? 10 : 30);
const PORT0 = +opt('--port', 21400);
const LEASE_MS = 5000;
const OPSD = join(BUILD, 'opsd');
const WS = join(BUILD, 'bench', 'bench_ws_client');
const NATS = ['/usr/sbin/nats-server', '/usr/bin/nats-server'].find((p) => spawnSync(p, ['--version']).status === 0);
if (!NATS) throw new Error('nats-server is not installed (scripts/deps.sh test)');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const log = (...a) => console.error('cluster-bench:', ...a);
const dir = mkdtempSync(join(tmpdir(), 'opsd-bench-cluster-'));
const procs = [];
let cleaning = false;
async function cleanup() {
  if (cleaning) return;
  cleaning = true;
  for (const p of procs.slice().reverse()) if (p.exitCode === null && !p.signalCode) p.kill('SIGKILL');
  await sleep(300);
  rmSync(dir, { recursive: true, force: true });
}
process.on('SIGINT', async () => { await cleanup(); process.exit(130); });

function start(cmd, argv, logFile) {
  const p = spawn(cmd, argv, { stdio: ['ignore', 'pipe', 'pipe'] });
  let text = '';
  p.stdout.on('data', (b) => { text += b; });
  p.stderr.on('data', (b) => { text += b; });
  p.text = () => text;
  p.exited = new Promise((r) => p.on('exit', r));
  p.on('exit', () => writeFileSync(logFile, text));
  procs.push(p);
  return p;
}

// ---- NATS ----
const nport = (i, k) => PORT0 + i * 3 + k; // k: 0 client, 1 route, 2 monitor
const natsUrls = [0, 1, 2].map((i) => `nats://127.0.0.1:${nport(i, 0)}`);
const routes = [0, 1, 2].map((i) => `nats://127.0.0.1:${nport(i, 1)}`).join(', ');
for (let i = 0; i < 3; i++) {
  const d = join(dir, `nats${i}`);
  mkdirSync(d);
  writeFileSync(join(d, 'nats.conf'), `server_name: n${i}
listen: 127.0.0.1:${nport(i, 0)}
http: 127.0.0.1:${nport(i, 2)}
jetstream { store_dir: "${join(d, 'js')}" }
cluster { name: opsd-bench, listen: 127.0.0.1:${nport(i, 1)}, routes: [${routes}] }
`);
  start(NATS, ['-c', join(d, 'nats.conf')], join(d, 'nats.log'));
}
for (let i = 0; i < 3; i++) {
  for (let t = 0; ; t++) {
    try {
      const r = await fetch(`http://127.0.0.1:${nport(i, 2)}/healthz?js-enabled-only=true`);
      if (r.status === 200) break;
    } catch { /* not yet */ }
    if (t > 150) throw new Error(`nats-server ${i} did not become healthy`);
    await sleep(200);
  }
}
log(`NATS with JetStream at ${natsUrls.join(', ')}`);

// ---- opsd nodes ----
const names = ['a', 'b', 'c'];
const nodes = {};
const opsdPort = (i) => PORT0 + 9 + i;
function config(n, i) {
  return `server:
  listen: 127.0.0.1:${opsdPort(i)}
  data_dir: ${join(dir, `data-${n}`)}
  log_level: warn
cluster:
  name: bench
  node: ${n}
  servers: [${natsUrls.join(', ')}]
  lease: ${LEASE_MS}ms
drivers:
  - type: simulator
    name: plant
    nodes: [a]
    points:
      - {name: "p-{${'1'.padStart(6, '0')}..${String(POINTS).padStart(6, '0')}}", type: double, pattern: sine, period: ${PERIOD}ms, min: 0, max: 100, resolution: 0.01}
  - type: simulator
    name: fo
    points:
      - {name: "fo-{1..10}", type: double, pattern: sine, period: 1s, min: 0, max: 100}
`;
}
async function startNode(n) {
  const i = names.indexOf(n);
  const cfg = join(dir, `${n}.yaml`);
  writeFileSync(cfg, config(n, i));
  const p = start(OPSD, ['--config', cfg], join(dir, `${n}.log`));
  const url = `http://127.0.0.1:${opsdPort(i)}`;
  for (let t = 0; !/listening on/.test(p.text()); t++) {
    if (p.exitCode !== null || t > 300) throw new Error(`opsd ${n} did not start: ${p.text().slice(-400)}`);
    await sleep(100);
  }
  nodes[n] = { proc: p, url, port: opsdPort(i), pid: p.pid };
  return nodes[n];
}
async function get(n, path) {
  const r = await fetch(`${nodes[n].url}${path}`, { signal: AbortSignal.timeout(3000) });
  return r.status === 200 ? (path === '/metrics' ? r.text() : r.json()) : null;
}
function metric(text, key) {
  const line = text.split('\n').find((l) => l.startsWith(`${key} `));
  return line ? Number(line.slice(key.length + 1)) : NaN;
}
function cpuSeconds(pid) {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const parts = f.slice(f.lastIndexOf(')') + 2).split(' ');
  return (Number(parts[11]) + Number(parts[12])) / 100; // utime, stime in ticks (USER_HZ 100)
}
async function owner(n, unit) {
  const c = await get(n, '/api/v1/cluster').catch(() => null);
  const u = c && c.units.find((x) => x.name === unit);
  return u ? u.owner : undefined;
}

await startNode('a');
for (let t = 0; (await owner('a', 'plant')) !== 'a'; t++) {
  if (t > 150) throw new Error('a does not own plant');
  await sleep(100);
}
await startNode('b');
await startNode('c');
await sleep(3000);
log(`nodes a, b, c up; a owns plant (${POINTS} points every ${PERIOD} ms: ${Math.round(POINTS * 1000 / PERIOD)} values/s)`);

// ---- mirror: b applies, no clients ----
const rows = [];
{
  await sleep(2000);
  const m0 = await get('b', '/metrics');
  const c0 = cpuSeconds(nodes.b.pid);
  const a0 = cpuSeconds(nodes.a.pid);
  const t0 = Date.now();
  await sleep(WINDOW * 1000);
  const m1 = await get('b', '/metrics');
  const c1 = cpuSeconds(nodes.b.pid);
  const a1 = cpuSeconds(nodes.a.pid);
  const s = (Date.now() - t0) / 1000;
  const key = 'opsd_cluster_live_values_total{dir="in"}';
  const vin = metric(m1, key) - metric(m0, key);
  const dropped = metric(m1, 'opsd_cluster_live_dropped_total{queue="in"}') - metric(m0, 'opsd_cluster_live_dropped_total{queue="in"}');
  const cpu = c1 - c0;
  rows.push({
    what: 'mirror: values b applied (no clients)', rate: vin / s, cpu_pct: (100 * cpu) / s,
    per_m: cpu / (vin / 1e6), note: `a (owner: simulator, encode, publish) ${(100 * (a1 - a0) / s).toFixed(1)} % of a core; in-queue drops ${dropped}; mirror lag ${metric(m1, 'opsd_cluster_mirror_lag_seconds')} s`,
  });
}

// ---- cross and local: clients on b, then on a ----
function wsRun(n, label) {
  const r = spawnSync(WS, ['--port', String(nodes[n].port), '--server-pid', String(nodes[n].pid), '--clients', String(CLIENTS),
    '--prefix', 'p-', '--interval', '100ms', '--period-ms', String(PERIOD), '--warmup', String(QUICK ? 3 : 8),
    '--duration', String(WINDOW), '--label', label], { encoding: 'utf8', timeout: (WINDOW + 60) * 1000 });
  const line = (r.stdout || '').split('\n').find((l) => l.startsWith('RESULT'));
  if (!line) throw new Error(`bench_ws_client on ${n}: ${r.stderr}`);
  return Object.fromEntries(line.split(' ').slice(1).map((kv) => kv.split('=')).map(([k, v]) => [k, isNaN(+v) ? v : +v]));
}
const cross = wsRun('b', 'cross');
rows.push({ what: `cross: ${CLIENTS} WebSocket clients on b, a's points`, rate: cross.values_per_s, p50: cross.p50_ms, p99: cross.p99_ms, cpu_pct: cross.server_cpu_pct, note: `lost ${cross.lost}` });
const local = wsRun('a', 'local');
rows.push({ what: `local: the same clients on a (one node)`, rate: local.values_per_s, p50: local.p50_ms, p99: local.p99_ms, cpu_pct: local.server_cpu_pct, note: `lost ${local.lost}` });

// ---- failover ----
const times = [];
for (let k = 0; k < KILLS; k++) {
  const was = await owner('b', 'fo') || await owner('c', 'fo');
  if (!was) throw new Error('fo has no owner before a kill');
  const others = names.filter((x) => x !== was);
  const t0 = Date.now();
  nodes[was].proc.kill('SIGKILL');
  await nodes[was].proc.exited;
  let got = null;
  while (!got) {
    for (const o of others) {
      const w = await owner(o, 'fo');
      if (w && w !== was) got = w;
    }
    if (Date.now() - t0 > LEASE_MS + 15000) throw new Error(`failover ${k + 1}: no new owner after ${Date.now() - t0} ms`);
    if (!got) await sleep(50);
  }
  const ms = Date.now() - t0;
  times.push(ms);
  log(`failover ${k + 1}/${KILLS}: ${was} killed, ${got} owns fo after ${ms} ms`);
  await startNode(was);
  await sleep(3000); // heard by the others, settled
}
times.sort((x, y) => x - y);
const q = (p) => times[Math.min(times.length - 1, Math.ceil(p * times.length) - 1)];

// ---- report ----
const f = (x, d = 0) => (x === undefined || Number.isNaN(x) ? '-' : Number(x).toFixed(d));
console.log(`\ncluster benchmark: 3 nats-server + 3 opsd on one machine (${POINTS} points every ${PERIOD} ms on a; window ${WINDOW} s)`);
console.log('| measure | values/s | p50 ms | p99 ms | CPU % of a core | CPU s per M values | notes |');
console.log('| --- | --- | --- | --- | --- | --- | --- |');
for (const r of rows) console.log(`| ${r.what} | ${f(r.rate)} | ${f(r.p50, 1)} | ${f(r.p99, 1)} | ${f(r.cpu_pct, 1)} | ${f(r.per_m, 3)} | ${r.note || ''} |`);
console.log(`| failover over ${KILLS} kill -9 (lease ${LEASE_MS} ms) | - | ${q(0.5)} | ${q(0.99)} | - | - | min ${times[0]}, max ${times[times.length - 1]} |`);
const mirror = rows[0];
console.log('\ntargets:');
console.log(`  1 M mirrored values/s applied: ${f(mirror.rate)} /s -> ${mirror.rate >= 1e6 ? 'met' : 'NOT met'}`);
console.log(`  <= 0.25 core per million/s: ${f(mirror.per_m, 3)} CPU-s per M values -> ${mirror.per_m <= 0.25 ? 'met' : 'NOT met'}`);
console.log(`  cross-node p99 adds <= 50 ms: ${f(cross.p99_ms - local.p99_ms, 1)} ms -> ${cross.p99_ms - local.p99_ms <= 50 ? 'met' : 'NOT met'}`);
console.log(`  failover p99 <= lease + 2 s: ${q(0.99)} ms -> ${q(0.99) <= LEASE_MS + 2000 ? 'met' : 'NOT met'}`);
await cleanup();

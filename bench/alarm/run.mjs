// Alarm storm benchmark (SEEDS.md A1): N alarms in 10 groups, each the sum of 4 points with 4
// thresholds (HH, H, L, LL) whose limits are deployment variables, message templates with
// number formats; a burst that moves every alarm high (H and HH raise: 2 events) and then
// low (HH, H clear, L, LL raise: 4 events) within 5 s: 6 events per alarm, 18,000 for A1.
//
//   node bench/alarm/run.mjs OPSD_BINARY [a1 | scale-N]...     (default: a1)
//
// a1: 3,000 alarms x 4 thresholds, 10 groups, 18,000 events in 5 s; 2 unfiltered WebSocket
// summary subscribers and 2 filtered ones (group-03, state active).
// scale-N: N alarms (a multiple of 250), 6N events in 5 s, 25 subscribers with 25 different
// filters, state active and: one group (10), one group and priority 1 (10), one group and
// priority 2 (5).
//
// Samples are posted as InfluxDB line protocol (POST /write) every 100 ms, 4 requests in
// parallel per tick (the cheapest form for the load tool to build; the bodies are built
// before the burst). The subscribers run in one C process, bench_alarm_sub (alarm_sub.c, built
// with -DOPSD_BENCH=ON next to opsd, or named by BENCH_SUB_TOOL; BENCH_SUB_TOOL= for none),
// else in separate node processes (BENCH_SUB_PROCS, default
// 5, each holding its share of the subscriptions), so the publisher and the subscribers do not
// slow each other down inside one event loop; each reports its latencies at the end over IPC.
// The load average (/proc/loadavg) before and after each scenario is printed with the results:
// the machine may be shared.
// Prints per scenario: events generated and stored (counted by the server's metrics and by
// an alarm-events query), generation and storage rates, the time from the last post until
// the last event is durable, latency from the event's time ("since") to its arrival at the
// subscribers (p50, p99, max; filtered and unfiltered), frames and fresh snapshots received,
// opsd CPU (utime+stime, from /proc) from the first post until the last event is durable, also
// per event (the figure that depends least on how busy the machine is), and peak RSS (VmHWM). Everything on 127.0.0.1.
import { spawn, fork } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, '../../tests/integration/package.json'));
const WebSocket = require('ws');
if (process.argv[2] === '--subscriber') await subscriberProcess(); // never returns
const opsdBin = process.argv[2];
if (!opsdBin) {
  console.error('usage: node bench/alarm/run.mjs OPSD_BINARY [a1|scale-N]...');
  process.exit(2);
}
const scenarios = process.argv.slice(3).length ? process.argv.slice(3) : ['a1'];
const TICK = Number(process.env.CLK_TCK || 100);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function freePort() {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

function config(port, dir, n) {
  const per = n / 10;
  const w = String(per - 1).length;
  const last = String(per - 1).padStart(w, '0');
  const first = '0'.repeat(w);
  return `server:
  listen: 127.0.0.1:${port}
  data_dir: ${dir}/data
  log_level: warn
drivers:
  - type: simulator
    name: probe
    points:
      - {name: probe, type: double, pattern: ramp, period: 100ms}
points:
  - {name: "t{1..4}-{00..09}-{${first}..${last}}", type: double, writable: true}
deployment:
  state: Normal
  states:
    Normal:   {hhMax: 380, hMax: 350, lMin: 280, llMin: 250}
    Startup:  {hhMax: 420, hMax: 400, lMin: 150, llMin: 100}
    Shutdown: {hhMax: 300, hMax: 280, lMin: 50, llMin: 20}
alarms:
  retention: 1h
  partition: 10m
  definitions:
    - area: Intake
      each: {g: "00..09", i: "${first}..${last}"}
      group: "group-$g"
      name: "load-$g-$i"
      expression: "{t1-$g-$i} + {t2-$g-$i} + {t3-$g-$i} + {t4-$g-$i}"
      thresholds:
        - {name: HH, op: ">=", limit: hhMax, deadband: 5, priority: 1,
           message: "Total intake tank load too high: {0:#,##0.00}, exceeds {1:#,##0.00}"}
        - {name: H, op: ">=", limit: hMax, deadband: 5, priority: 2,
           message: "Total intake tank load high: {0:#,##0.00}, exceeds {1:#,##0.00}"}
        - {name: L, op: "<=", limit: lMin, deadband: 5, priority: 2,
           message: "Total intake tank load low: {0:#,##0.00}, under {1:#,##0.00}"}
        - {name: LL, op: "<=", limit: llMin, deadband: 5, priority: 1,
           message: "Total intake tank load too low: {0:#,##0.00}, under {1:#,##0.00}"}
`;
}

async function req(url, method, path, body) {
  for (let attempt = 0; ; attempt++) {
    try {
      return await req1(url, method, path, body);
    } catch (e) {
      /* a kept-alive connection the server closed as it was reused: once more */
      if (attempt === 2 || !(e.cause && /closed|ECONNRESET|EPIPE/.test(String(e.cause.message || e.cause.code)))) throw e;
    }
  }
}

async function req1(url, method, path, body) {
  const r = await fetch(url + path, {
    method, body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    headers: body === undefined ? {} : { 'Content-Type': typeof body === 'string' ? 'text/plain' : 'application/json' },
    signal: AbortSignal.timeout(120000),
  });
  const text = await r.text();
  if (r.status === 204) return null;
  if (r.status !== 200) throw new Error(`${method} ${path}: ${r.status} ${text.slice(0, 200)}`);
  return JSON.parse(text);
}

async function metric(url, name) {
  const r = await fetch(url + '/metrics', { signal: AbortSignal.timeout(30000) });
  const m = (await r.text()).match(new RegExp(`^${name} ([0-9.e+]+)$`, 'm'));
  return m ? Number(m[1]) : NaN;
}

function cpuSeconds(pid) {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const parts = f.slice(f.lastIndexOf(')') + 2).split(' ');
  return (Number(parts[11]) + Number(parts[12])) / TICK;
}

function hwmMiB(pid) {
  const m = readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmHWM:\s+(\d+)/);
  return m ? Math.round(Number(m[1]) / 1024) : NaN;
}

function pct(a, p) {
  if (!a.length) return NaN;
  const s = a.slice().sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

function subscriber(wsUrl, id, filter) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(wsUrl, { perMessageDeflate: false });
    const s = { ws, lat: [], rows: 0, frames: 0, snapshots: 0, removed: 0, ready: null };
    s.ready = new Promise((r) => { s.readyResolve = r; });
    ws.on('open', () => {
      ws.send(JSON.stringify({ op: 'subscribe_alarms', id, filter }));
      resolve(s);
    });
    ws.on('error', reject);
    ws.on('message', (data) => {
      const now = Date.now();
      const m = JSON.parse(data.toString());
      if (m.op === 'alarms') {
        s.snapshots++;
        if (s.snapshots === 1) s.readyResolve();
        else for (const a of m.alarms) if (a.since >= s.t0) s.lat.push(now - a.since);
      } else if (m.op === 'alarm_changes') {
        s.frames++;
        for (const c of m.changes) {
          s.rows++;
          if (c.removed) s.removed++;
          else if (c.since >= s.t0) s.lat.push(now - c.since);
        }
      }
    });
  });
}

// A child process: connects the subscriptions it is given, reports 'ready' once each has its
// first snapshot, takes t0, and on 'finish' answers every subscription's figures and exits.
async function subscriberProcess() {
  const job = JSON.parse(process.env.BENCH_SUB_JOB);
  const subs = [];
  for (const x of job.subs) subs.push({ ...x, s: await subscriber(job.wsUrl, x.id, x.filter) });
  await Promise.all(subs.map((x) => x.s.ready));
  process.send({ ready: true });
  process.on('message', (m) => {
    if (m.t0) for (const x of subs) x.s.t0 = m.t0;
    if (m.finish) {
      const out = subs.map((x) => ({ kind: x.kind, lat: x.s.lat, rows: x.s.rows, frames: x.s.frames,
        snapshots: x.s.snapshots, removed: x.s.removed }));
      for (const x of subs) x.s.ws.close();
      process.send({ results: out }, () => process.exit(0));
    }
  });
  await new Promise(() => {});
}

// The subscribers in one C process (bench/alarm/alarm_sub.c), the cheapest load tool: used
// when BENCH_SUB_TOOL names it or it was built next to opsd (BUILD/bench/bench_alarm_sub).
// Same interface as subscriberProcesses.
function subTool() {
  if (process.env.BENCH_SUB_TOOL !== undefined) return process.env.BENCH_SUB_TOOL || null;
  const p = join(dirname(opsdBin), 'bench', 'bench_alarm_sub');
  return existsSync(p) ? p : null;
}

async function subscriberTool(tool, port, list) {
  const args = ['--port', String(port)];
  for (const x of list) args.push('--sub', `${x.kind}:${x.id}:${x.filter ? x.filter.group : '-'}${x.filter && x.filter.priority ? `:${x.filter.priority}` : ''}`);
  args.push('--live', 'probe');
  const child = spawn(tool, args, { stdio: ['pipe', 'pipe', 'inherit'] });
  let out = '';
  const lines = [];
  let waiting = null;
  child.stdout.on('data', (d) => {
    out += d;
    let i;
    while ((i = out.indexOf('\n')) >= 0) { lines.push(out.slice(0, i)); out = out.slice(i + 1); }
    if (waiting) waiting();
  });
  const next = (pred) => new Promise((resolve, reject) => {
    const check = () => { const l = lines.find(pred); if (l) { waiting = null; resolve(l); } };
    waiting = check;
    child.once('exit', (c) => reject(new Error(`bench_alarm_sub exited ${c}`)));
    check();
  });
  await next((l) => l === 'ready');
  return {
    start(t0) { child.stdin.write(`t0 ${t0}\n`); },
    async finish() {
      const cpu = cpuSeconds(child.pid);
      const done = new Promise((r) => child.once('exit', r));
      child.stdin.write('finish\n');
      await done;
      return lines.filter((l) => l.startsWith('{')).map((l) => ({ ...JSON.parse(l), tool_cpu_s: cpu }));
    },
  };
}

// Starts the subscriber processes (the subscriptions dealt round robin) and waits until every
// subscription has its first snapshot. Returns {start(t0), finish() -> [per kind: {kind,
// clients, rows, frames, snapshots, p50, p99, max}]}.
async function subscriberProcesses(wsUrl, list) {
  const nproc = Math.max(1, Math.min(list.length, Number(process.env.BENCH_SUB_PROCS || 5)));
  const procs = [];
  for (let p = 0; p < nproc; p++) {
    const job = JSON.stringify({ wsUrl, subs: list.filter((_, i) => i % nproc === p) });
    const child = fork(fileURLToPath(import.meta.url), ['--subscriber'],
      { stdio: ['ignore', 'inherit', 'inherit', 'ipc'], env: { ...process.env, BENCH_SUB_JOB: job } });
    const ready = new Promise((resolve, reject) => {
      child.once('message', (m) => (m.ready ? resolve() : reject(new Error('subscriber: no ready'))));
      child.once('exit', (c) => reject(new Error(`subscriber process exited ${c}`)));
    });
    procs.push({ child, ready });
  }
  await Promise.all(procs.map((p) => p.ready));
  return {
    start(t0) { for (const p of procs) p.child.send({ t0 }); },
    async finish() {
      const all = await Promise.all(procs.map((p) => new Promise((resolve) => {
        p.child.on('message', (m) => { if (m.results) resolve(m.results); });
        p.child.send({ finish: true });
      })));
      const subs = all.flat();
      return [...new Set(subs.map((x) => x.kind))].map((kind) => {
        const ss = subs.filter((x) => x.kind === kind);
        const lat = ss.flatMap((x) => x.lat);
        return {
          kind, clients: ss.length, rows: ss.reduce((a, x) => a + x.rows, 0) / ss.length,
          frames: ss.reduce((a, x) => a + x.frames, 0) / ss.length,
          snapshots: ss.reduce((a, x) => a + x.snapshots - 1, 0) / ss.length,
          p50: pct(lat, 50), p99: pct(lat, 99), max: pct(lat, 100),
        };
      });
    },
  };
}

const loadavg = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');

async function run(name) {
  const n = name === 'a1' ? 3000 : Number(name.slice(6));
  if (!Number.isInteger(n) || n < 250 || n % 250) throw new Error(`bad scenario ${name}`);
  const per = n / 10;
  const w = String(per - 1).length;
  const dir = mkdtempSync(join(tmpdir(), 'opsd-bench-alarm.'));
  const port = await freePort();
  writeFileSync(join(dir, 'opsd.yaml'), config(port, dir, n));
  const proc = spawn(opsdBin, ['--config', join(dir, 'opsd.yaml')], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  proc.stderr.on('data', (b) => { log += b; });
  const url = `http://127.0.0.1:${port}`;
  try {
    for (let i = 0; ; i++) {
      try { if ((await fetch(url + '/healthz')).status === 200) break; } catch { /* not yet */ }
      if (i > 600) throw new Error(`opsd did not start: ${log.slice(-500)}`);
      await sleep(100);
    }
    // Every point at 80: each alarm at 320, between the limits (no events).
    const names = [];
    for (let g = 0; g < 10; g++) for (let i = 0; i < per; i++) names.push(`${String(g).padStart(2, '0')}-${String(i).padStart(w, '0')}`);
    for (let k = 1; k <= 4; k++) {
      for (let i = 0; i < names.length; i += 50000) {
        const part = names.slice(i, i + 50000);
        await req(url, 'POST', '/write?precision=ms', part.map((s) => `t${k}-${s} value=80`).join('\n'));
      }
    }
    await sleep(500);
    const ev0 = await metric(url, 'opsd_alarm_events_total');
    const wr0 = await metric(url, 'opsd_alarm_events_written_total');

    const list = [];
    const wsUrl = `ws://127.0.0.1:${port}/api/v1/stream`;
    if (name === 'a1') {
      list.push({ kind: 'unfiltered', id: 'u1', filter: undefined }, { kind: 'unfiltered', id: 'u2', filter: undefined });
      list.push({ kind: 'filtered', id: 'f1', filter: { group: 'group-03', state: 'active' } });
      list.push({ kind: 'filtered', id: 'f2', filter: { group: 'group-03', state: 'active' } });
    } else {
      // 25 different filters: each group; each group with priority 1 (HH, LL); five groups
      // with priority 2 (H, L).
      for (let i = 0; i < 25; i++) {
        const filter = { group: `group-${String(i % 10).padStart(2, '0')}`, state: 'active' };
        if (i >= 10) filter.priority = i < 20 ? '1' : '2';
        list.push({ kind: 'filtered', id: `f${i}`, filter });
      }
    }
    const tool = subTool();
    const subp = tool ? await subscriberTool(tool, port, list) : await subscriberProcesses(wsUrl, list);

    // The burst: 50 ticks of 100 ms; ticks 0..24 move n/25 alarms each high (t1 = 160: 400),
    // ticks 25..49 move them low (t1 = -40: 200). Bodies built beforehand.
    const batch = n / 25;
    const bodies = [];
    for (let tick = 0; tick < 50; tick++) {
      const first = (tick % 25) * batch;
      const value = tick < 25 ? 160 : -40;
      const parts = [];
      for (let c = 0; c < 4; c++) {
        const lo = first + (c * batch) / 4, hi = first + ((c + 1) * batch) / 4;
        let lines = '';
        for (let a = lo; a < hi; a++) lines += `t1-${names[a]} value=${value}\n`;
        parts.push(lines);
      }
      bodies.push(parts);
    }
    const load0 = loadavg();
    const t0 = Date.now();
    subp.start(t0);
    const cpu0 = cpuSeconds(proc.pid);
    for (let tick = 0; tick < 50; tick++) {
      const due = t0 + tick * 100;
      if (Date.now() < due) await sleep(due - Date.now());
      await Promise.all(bodies[tick].map((b) => req(url, 'POST', '/write?precision=ms', b)));
    }
    const tPosted = Date.now();
    const want = 6 * n;
    let tGen = null, tDur = null;
    for (let i = 0; i < 1200 && tDur === null; i++) {
      const ev = (await metric(url, 'opsd_alarm_events_total')) - ev0;
      const wr = (await metric(url, 'opsd_alarm_events_written_total')) - wr0;
      const now = Date.now();
      if (tGen === null && ev >= want) tGen = now;
      if (wr >= want) tDur = now;
      else await sleep(20);
    }
    const cpu = cpuSeconds(proc.pid) - cpu0;
    await sleep(1500); // the last frames
    let stored = 0;
    for (let g = 0; g < 10; g++) {
      for (const kind of ['active', 'clear']) {
        const q = `/api/v1/alarm-events?from=${t0 - 1000}&limit=100000&kind=${kind}&group=group-${String(g).padStart(2, '0')}`;
        stored += (await req(url, 'GET', q)).count;
      }
    }
    const dropped = await metric(url, 'opsd_alarm_events_dropped_total');
    const subs = await subp.finish();
    const row = (kind) => {
      const r = subs.find((x) => x.kind === kind);
      return r ? { clients: r.clients, rows: r.rows, frames: r.frames, snapshots: r.snapshots, p50: r.p50, p99: r.p99, max: r.max,
        tool: tool ? 'C' : 'node', tool_cpu_s: r.tool_cpu_s } : null;
    };
    const res = {
      name, alarms: n, conditions: 4 * n, events: want, stored, dropped,
      burst_s: (tPosted - t0) / 1000,
      gen_rate: tGen ? Math.round(want / ((tGen - t0) / 1000)) : NaN,
      store_rate: tDur ? Math.round(want / ((tDur - t0) / 1000)) : NaN,
      durable_after_last_post_ms: tDur ? tDur - tPosted : NaN,
      cpu_s: Math.round(cpu * 100) / 100, cpu_us_per_event: Math.round(cpu * 1e7 / want) / 10, hwm_mib: hwmMiB(proc.pid), load_before: load0, load_after: loadavg(),
      unfiltered: row('unfiltered'), filtered: row('filtered'), live: row('live'),
    };
    return res;
  } catch (e) {
    console.error(`${name}: ${e.message}; opsd ${proc.exitCode === null ? 'running' : `exited ${proc.exitCode}`}; its log ends:\n${log.slice(-1500)}`);
    throw e;
  } finally {
    proc.kill('SIGTERM');
    await new Promise((r) => { proc.on('exit', r); setTimeout(r, 15000); });
    rmSync(dir, { recursive: true, force: true });
  }
}

const results = [];
for (const s of scenarios) {
  const r = await run(s);
  results.push(r);
  console.error(JSON.stringify(r));
}
console.log('| scenario | alarms x thr | events in burst | stored | dropped | burst s | generated/s | stored/s | durable after last post | opsd CPU s | opsd CPU µs/event | peak RSS MiB | load avg before / after |');
console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |');
for (const r of results) {
  console.log(`| ${r.name} | ${r.alarms} x 4 | ${r.events} | ${r.stored} | ${r.dropped} | ${r.burst_s.toFixed(2)} | ${r.gen_rate} | ${r.store_rate} | ${r.durable_after_last_post_ms} ms | ${r.cpu_s} | ${r.cpu_us_per_event} | ${r.hwm_mib} | ${r.load_before} / ${r.load_after} |`);
}
console.log('');
console.log('| scenario | subscribers | clients | rows/client | frames/client | fresh snapshots/client | latency p50 ms | p99 ms | max ms | load tool (CPU s) |');
console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |');
for (const r of results) {
  for (const k of ['unfiltered', 'filtered', 'live']) {
    const x = r[k];
    if (!x) continue;
    console.log(`| ${r.name} | ${k === 'live' ? 'live values of a 100 ms point (not alarms)' : k} | ${x.clients} | ${Math.round(x.rows)} | ${Math.round(x.frames)} | ${x.snapshots} | ${x.p50} | ${x.p99} | ${x.max} | ${x.tool}${x.tool_cpu_s !== undefined ? ` (${x.tool_cpu_s}, all kinds)` : ''} |`);
  }
}

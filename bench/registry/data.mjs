// Data operation benchmark: NCMP passthrough reads through opsd to a DMI plugin's data side,
// against the same reads sent to the plugin directly, at several client concurrencies. Prints a
// Markdown table: requests/s, latency p50/p99, the latency opsd adds (p50/p99 through opsd
// minus direct), and opsd's CPU per read.
//
//   node bench/registry/data.mjs OPSD_BINARY [CONCURRENCY...]     (default 1 10 100 1000)
// Environment: DURATION (seconds counted per row, default 10), HANDLES (default 1000),
// DATA_THREADS (registry.data_concurrency, default 64), DATA_LOAD (the bench_data_load
// binary; default: bench/bench_data_load next to OPSD_BINARY).
// The handles' module sets come from the test DMI plugin in Node
// (tests/integration/lib/registry_dmi.mjs, their dmiModelPlugin); their data plugin
// (dmiDataPlugin) is bench_data_load's stub, a C stand-in answering at once, and the load is
// bench_data_load's closed loop (C keep-alive connections, one request in flight each): the
// load and the stand-in cost a few µs a request, so the figures are opsd's. Everything on
// 127.0.0.1.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir, loadavg } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Agent, request } from 'node:http';

const here = dirname(fileURLToPath(import.meta.url));
const { startDmi } = await import(join(here, '../../tests/integration/lib/registry_dmi.mjs'));
const opsdBin = process.argv[2];
if (!opsdBin) {
  console.error('usage: node bench/registry/data.mjs OPSD_BINARY [CONCURRENCY...]');
  process.exit(2);
}
const levels = process.argv.slice(3).length ? process.argv.slice(3).map(Number) : [1, 10, 100, 1000];
const DURATION = Number(process.env.DURATION || 10);
const HANDLES = Number(process.env.HANDLES || 1000);
const THREADS = Number(process.env.DATA_THREADS || 64);
const LOAD = process.env.DATA_LOAD || join(dirname(opsdBin), 'bench', 'bench_data_load');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function freePort() {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

const agent = new Agent({ keepAlive: true, maxSockets: 16 });
function call(port, method, path, body) {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, method, path, agent, headers: body ? { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) } : {} }, (res) => {
      const parts = [];
      res.on('data', (c) => parts.push(c));
      res.on('end', () => resolve({ status: res.statusCode, text: Buffer.concat(parts).toString() }));
    });
    req.on('error', (e) => { e.message += ` (port ${port} ${method} ${path.slice(0, 60)})`; reject(e); });
    if (body) req.write(body);
    req.end();
  });
}

// one row of load: bench_data_load get; returns its RESULT fields
function load(port, path, conns, extra = [], pid = 0) {
  const args = ['get', '--port', String(port), '--path', path, '--handles', String(HANDLES), '--conns', String(conns),
    '--duration', String(DURATION), '--warmup', '2', ...extra];
  if (pid) args.push('--server-pid', String(pid));
  const out = execFileSync(LOAD, args, { encoding: 'utf8' });
  const line = out.split('\n').find((l) => l.startsWith('RESULT'));
  return Object.fromEntries(line.split(' ').slice(1).map((kv) => kv.split('=')).map(([k, v]) => [k, k === 'tool' ? v : Number(v)]));
}

const dmi = await startDmi({});
const stubPort = await freePort();
const stub = spawn(LOAD, ['stub', '--port', String(stubPort)], { stdio: 'ignore' });
const stubUrl = `http://127.0.0.1:${stubPort}`;
const dir = mkdtempSync(join(tmpdir(), 'opsd-bench-data-'));
const port = await freePort();
writeFileSync(join(dir, 'opsd.yaml'), `server: {listen: 127.0.0.1:${port}, data_dir: ${dir}}
registry: {data_concurrency: ${THREADS}, health_interval: 0}
`);
const opsd = spawn(opsdBin, ['--config', join(dir, 'opsd.yaml')], { stdio: 'ignore' });
try {
  for (let i = 0; i < 100; i++) {
    try { if ((await call(port, 'GET', '/healthz')).status === 200) break; } catch { /* not yet */ }
    await sleep(100);
  }
  const ids = Array.from({ length: HANDLES }, (_, i) => `ch-${i}`);
  for (let k = 0; k < HANDLES; k += 100) {
    await call(port, 'POST', '/ncmpInventory/v1/ch', JSON.stringify({ dmiDataPlugin: stubUrl, dmiModelPlugin: dmi.url,
      createdCmHandles: ids.slice(k, k + 100).map((id) => ({ cmHandle: id, moduleSetTag: 'tagA', cmHandleProperties: { neType: 'RadioNode' } })) }));
  }
  for (;;) {
    const r = await call(port, 'POST', '/ncmp/v1/ch/id-searches', JSON.stringify({ cmHandleQueryParameters: [
      { conditionName: 'cmHandleWithCpsPath', conditionParameters: [{ cpsPath: "//state[@cm-handle-state='READY']" }] }] }));
    if (JSON.parse(r.text).length === HANDLES) break;
    await sleep(200);
  }
  const RES = encodeURIComponent('ManagedElement=NRNode1/GNBDUFunction=1');
  const viaOpsd = `/ncmp/v1/ch/ch-{i}/data/ds/ncmp-datastore:passthrough-operational?resourceIdentifier=${RES}`;
  const body = JSON.stringify({ operation: 'read', dataType: 'application/json', cmHandleProperties: { neType: 'RadioNode' }, moduleSetTag: 'tagA' });
  const direct = `/dmi/v1/ch/ch-{i}/data/ds/ncmp-datastore:passthrough-operational?resourceIdentifier=${RES}`;
  console.log(`seconds per row: ${DURATION}, handles: ${HANDLES}, data threads: ${THREADS}, load ${loadavg()[0].toFixed(1)}`);
  console.log('| clients | direct req/s | direct p50/p99 (ms) | via opsd req/s | via opsd p50/p99 (ms) | added p50/p99 (ms) | opsd CPU per read (µs) | errors |');
  console.log('| --- | --- | --- | --- | --- | --- | --- | --- |');
  for (const c of levels) {
    const d = load(stubPort, direct, c, ['--method', 'POST', '--body', body]);
    const o = load(port, viaOpsd, c, [], opsd.pid);
    const f = (x) => x.toFixed(2);
    const cpu = o.requests ? (o.server_cpu_s * 1e6 / o.requests).toFixed(1) : '-';
    console.log(`| ${c} | ${d.rps} | ${f(d.p50_ms)}/${f(d.p99_ms)} | ${o.rps} | ${f(o.p50_ms)}/${f(o.p99_ms)} | ${f(o.p50_ms - d.p50_ms)}/${f(o.p99_ms - d.p99_ms)} | ${cpu} | ${d.non200 + d.errors + o.non200 + o.errors} |`);
  }
  console.log(`load ${loadavg()[0].toFixed(1)} at the end`);
} finally {
  opsd.kill('SIGTERM');
  await new Promise((r) => opsd.once('exit', r));
  stub.kill('SIGTERM');
  await dmi.close();
  agent.destroy();
  rmSync(dir, { recursive: true, force: true });
}

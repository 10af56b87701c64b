// Data operation benchmark: NCMP passthrough reads through opsd to the test DMI plugin
// (tests/integration/lib/registry_dmi.mjs) against the same reads sent to the plugin directly,
// at several client concurrencies. Prints a Markdown table: requests/s, latency p50/p99, and
// the latency opsd adds (p50/p99 through opsd minus direct).
//
//   node bench/registry/data.mjs OPSD_BINARY [CONCURRENCY...]     (default 1 10 100 1000)
// Environment: REQUESTS (per row, default 20000), HANDLES (default 1000), DATA_THREADS
// (registry.data_concurrency, default 64). Everything on 127.0.0.1; the plugin answers at once.
import { spawn } from 'node:child_process';
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
const REQUESTS = Number(process.env.REQUESTS || 20000);
const HANDLES = Number(process.env.HANDLES || 1000);
const THREADS = Number(process.env.DATA_THREADS || 64);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function freePort() {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

const agent = new Agent({ keepAlive: true, maxSockets: 2000 });
function call(port, method, path, body) {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, method, path, agent, headers: body ? { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) } : {} }, (res) => {
      const parts = [];
      res.on('data', (c) => parts.push(c));
      res.on('end', () => resolve({ status: res.statusCode, text: Buffer.concat(parts).toString() }));
    });
    req.on("error", (e) => { e.message += ` (port ${port} ${method} ${path.slice(0, 60)})`; reject(e); });
    if (body) req.write(body);
    req.end();
  });
}

async function run(port, mkReq, conc) {
  const lat = [];
  let next = 0, bad = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: conc }, async () => {
    while (next < REQUESTS) {
      const i = next++;
      const [method, path, body] = mkReq(i);
      const s = performance.now();
      const r = await call(port, method, path, body);
      lat.push(performance.now() - s);
      if (r.status !== 200) bad++;
    }
  }));
  const secs = (performance.now() - t0) / 1000;
  lat.sort((a, b) => a - b);
  return { rps: REQUESTS / secs, p50: lat[Math.floor(lat.length * 0.5)], p99: lat[Math.floor(lat.length * 0.99)], bad };
}

const dmi = await startDmi({});
const dmiPort = Number(new URL(dmi.url).port);
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
    await call(port, 'POST', '/ncmpInventory/v1/ch', JSON.stringify({ dmiPlugin: dmi.url,
      createdCmHandles: ids.slice(k, k + 100).map((id) => ({ cmHandle: id, moduleSetTag: 'tagA', cmHandleProperties: { neType: 'RadioNode' } })) }));
  }
  for (;;) {
    const r = await call(port, 'POST', '/ncmp/v1/ch/id-searches', JSON.stringify({ cmHandleQueryParameters: [
      { conditionName: 'cmHandleWithCpsPath', conditionParameters: [{ cpsPath: "//state[@cm-handle-state='READY']" }] }] }));
    if (JSON.parse(r.text).length === HANDLES) break;
    await sleep(200);
  }
  const RES = encodeURIComponent('ManagedElement=NRNode1/GNBDUFunction=1');
  const viaOpsd = (i) => ['GET', `/ncmp/v1/ch/ch-${i % HANDLES}/data/ds/ncmp-datastore:passthrough-operational?resourceIdentifier=${RES}`];
  const body = JSON.stringify({ operation: 'read', dataType: 'application/json', cmHandleProperties: { neType: 'RadioNode' }, moduleSetTag: 'tagA' });
  const direct = (i) => ['POST', `/dmi/v1/ch/ch-${i % HANDLES}/data/ds/ncmp-datastore:passthrough-operational?resourceIdentifier=${RES}`, body];
  console.log(`requests per row: ${REQUESTS}, handles: ${HANDLES}, data threads: ${THREADS}, load ${loadavg()[0].toFixed(1)}`);
  console.log('| clients | direct req/s | direct p50/p99 (ms) | via opsd req/s | via opsd p50/p99 (ms) | added p50/p99 (ms) | errors |');
  console.log('| --- | --- | --- | --- | --- | --- | --- |');
  for (const c of levels) {
    await run(dmiPort, direct, Math.min(c, 50)); // warm up
    const d = await run(dmiPort, direct, c);
    const o = await run(port, viaOpsd, c);
    const f = (x) => x.toFixed(2);
    console.log(`| ${c} | ${d.rps.toFixed(0)} | ${f(d.p50)}/${f(d.p99)} | ${o.rps.toFixed(0)} | ${f(o.p50)}/${f(o.p99)} | ${f(o.p50 - d.p50)}/${f(o.p99 - d.p99)} | ${d.bad + o.bad} |`);
  }
} finally {
  opsd.kill('SIGTERM');
  await new Promise((r) => opsd.once('exit', r));
  await dmi.close();
  agent.destroy();
  rmSync(dir, { recursive: true, force: true });
}

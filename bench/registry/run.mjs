// Registry benchmark: NCMP registration to READY, de-registration and searches against a real
// opsd and the test DMI plugin (tests/integration/lib/registry_dmi.mjs), in the shapes of
// SEEDS.md R1/R2 and NCMP's own K6 tests. Prints a Markdown table.
//
//   node bench/registry/run.mjs OPSD_BINARY [SCENARIO...]
// Scenarios: r1 (500 handles, 2 tags, 2 sync threads), r1-20k (20,000 handles, 2 tags, plugin
// delay 200 ms on the first 10 requests), k6 (50,000 handles, 5 tags), scale-N (N handles,
// 5 tags; e.g. scale-1000000), untagged-N (N handles without tags: one plugin round trip each,
// plugin delay 0), r1-20k-40tags (20,000 handles over 40 new tags, plugin delay 200 ms on the
// first 10 requests: the issue's R1 target). Default: r1 r1-20k k6.
// Per scenario: handles registered in requests of 100 (4 clients posting at once), the time
// until the last is READY; searches (id-search by module, full search by property, id-search by
// state); de-registration in requests of 100 (4 clients); opsd CPU (utime+stime) per phase and
// peak RSS (VmHWM). Everything on 127.0.0.1; every process started is stopped at the end.
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { Worker } from 'node:worker_threads';
import { tmpdir, loadavg } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const { startDmi } = await import(join(here, '../../tests/integration/lib/registry_dmi.mjs'));

const opsdBin = process.argv[2];
if (!opsdBin) {
  console.error('usage: node bench/registry/run.mjs OPSD_BINARY [r1|r1-20k|k6|scale-N|untagged-N...]');
  process.exit(2);
}
const scenarios = process.argv.slice(3).length ? process.argv.slice(3) : ['r1', 'r1-20k', 'k6'];
const CLIENTS = Number(process.env.CLIENTS || 4);
const TICK = Number(process.env.CLK_TCK || 100);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function freePort() {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

function cpuSeconds(pid) {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const rest = f.slice(f.lastIndexOf(')') + 2).split(' ');
  return (Number(rest[11]) + Number(rest[12])) / TICK;
}
function hwmMiB(pid) {
  const m = readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmHWM:\s+(\d+)/);
  return m ? Number(m[1]) / 1024 : NaN;
}

async function post(url, path, body) {
  const send = () => fetch(url + path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  let r;
  try {
    r = await send();
  } catch (e) {
    // a keep-alive socket that opsd closed after 30 s idle fails before the request is read:
    // once more on a fresh socket (a request that was applied would fail loudly: 109 or 100)
    if (!e.cause || e.cause.code !== 'UND_ERR_SOCKET') throw e;
    r = await send();
  }
  const text = await r.text();
  return { status: r.status, text };
}

async function status(url) {
  return (await (await fetch(`${url}/api/v1/status`)).json()).registry;
}

// runs jobs with `par` at once
async function pool(jobs, par) {
  let i = 0;
  const worker = async () => { while (i < jobs.length) { const j = jobs[i++]; await j(); } };
  await Promise.all(Array.from({ length: par }, worker));
}

async function scenario(name) {
  let n, tags, syncThreads = 4, delay = 0, delayFirst = 0, untagged = false;
  if (name === 'r1') { n = 500; tags = 2; syncThreads = 2; }
  else if (name === 'r1-20k') { n = 20000; tags = 2; delay = 200; delayFirst = 10; }
  else if (name === 'r1-20k-40tags') { n = 20000; tags = 40; delay = 200; delayFirst = 10; }
  else if (name === 'k6') { n = 50000; tags = 5; }
  else if (name.startsWith('scale-')) { n = Number(name.slice(6)); tags = 5; }
  else if (name.startsWith('untagged-')) { n = Number(name.slice(9)); tags = 0; untagged = true; }
  else throw new Error(`unknown scenario ${name}`);

  const dir = mkdtempSync(join(tmpdir(), 'opsd-bench-registry.'));
  const dmi = await startDmi({ delayMs: delay, delayFirst });
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  writeFileSync(join(dir, 'opsd.yaml'), `server: {listen: 127.0.0.1:${port}, data_dir: ${join(dir, 'data')}, log_level: warn}
registry:
  sync_batch: 100
  sync_concurrency: ${syncThreads}
  max_batch: 1000
`);
  const proc = spawn(opsdBin, ['--config', join(dir, 'opsd.yaml')], { stdio: ['ignore', 'ignore', 'inherit'] });
  try {
    for (let i = 0; ; i++) {
      try { if ((await fetch(`${url}/healthz`)).status === 200) break; } catch { /* not yet */ }
      if (i > 300) throw new Error('opsd did not start');
      await sleep(100);
    }
    const ids = Array.from({ length: n }, (_, i) => `dev-${i}`);
    const batches = [];
    for (let i = 0; i < n; i += 100) batches.push(ids.slice(i, i + 100));
    const row = { name, n, tags, load0: loadavg()[0] };

    // registration to READY
    let cpu0 = cpuSeconds(proc.pid);
    let t0 = performance.now();
    await pool(batches.map((b, k) => async () => {
      const r = await post(url, '/ncmpInventory/v1/ch', {
        dmiPlugin: dmi.url,
        createdCmHandles: b.map((id, i) => ({
          cmHandle: id,
          moduleSetTag: untagged ? '' : `tag-${(k * 100 + i) % tags}`,
          publicCmHandleProperties: { group: `g${(k * 100 + i) % 10}` },
        })),
      });
      if (r.status !== 200) throw new Error(`registration: ${r.status} ${r.text.slice(0, 200)}`);
    }), CLIENTS);
    row.acked_s = (performance.now() - t0) / 1000;
    for (;;) {
      const s = await status(url);
      if (s.ready === n) break;
      if (s.locked) throw new Error(`${s.locked} handles locked`);
      await sleep(20);
    }
    row.ready_s = (performance.now() - t0) / 1000;
    row.reg_cpu = cpuSeconds(proc.pid) - cpu0;
    row.fetches = dmi.stats.modules + dmi.stats.moduleResources;

    // searches
    const timeIt = async (path, body) => {
      const t = performance.now();
      let r;
      try {
        try {
          r = await post(url, path, body);
        } catch {
          // a keep-alive socket the server closed while idle (opsd's 30 s idle timeout) fails
          // the first request on it: searches are idempotent, so once more on a fresh socket
          r = await post(url, path, body);
        }
      } catch (e) {
        throw new Error(`${path} ${JSON.stringify(body).slice(0, 120)}: ${e.cause ? e.cause.message : e.message} after ${(performance.now() - t).toFixed(0)} ms (opsd ${proc.exitCode === null ? 'running' : `exited ${proc.exitCode} ${proc.signalCode}`})`);
      }
      const ms = performance.now() - t;
      if (r.status !== 200) throw new Error(`${path}: ${r.status} ${r.text.slice(0, 200)}`);
      return { ms, count: JSON.parse(r.text).length };
    };
    const modQ = { cmHandleQueryParameters: [{ conditionName: 'hasAllModules', conditionParameters: [{ moduleName: untagged ? 'untagged-1' : 'tag-0-module-1' }] }] };
    const propQ = { cmHandleQueryParameters: [{ conditionName: 'hasAllProperties', conditionParameters: [{ group: 'g3' }] }] };
    const stateQ = { cmHandleQueryParameters: [{ conditionName: 'cmHandleWithCpsPath', conditionParameters: [{ cpsPath: "//state[@cm-handle-state='READY']" }] }] };
    row.q_mod = await timeIt('/ncmp/v1/ch/id-searches', modQ);
    // while the full search (the largest answer) is written, /healthz is asked every 20 ms
    // from a worker thread (its own event loop: the main thread's parsing of the answer does
    // not delay it): its slowest answer, and opsd's own worst loop lag of the last second
    // (/metrics), say how long the server was held
    const prober = new Worker(`const { parentPort } = require('node:worker_threads'); let max = 0, on = true;
      parentPort.on('message', () => { on = false; });
      (async () => { await fetch('${url}/healthz'); parentPort.postMessage('ready'); /* warm: not counted */
        while (on) { const t = performance.now(); await fetch('${url}/healthz');
        max = Math.max(max, performance.now() - t); await new Promise((r) => setTimeout(r, 20)); }
        parentPort.postMessage(max); })();`, { eval: true });
    await new Promise((r) => prober.once('message', r));
    row.q_prop = await timeIt('/ncmp/v1/ch/searches', propQ);
    const lagText = await (await fetch(`${url}/metrics`)).text();
    row.loop_lag = Number((lagText.match(/^opsd_loop_lag_seconds (\S+)/m) || [])[1]) * 1000;
    row.health_max = await new Promise((r) => { prober.once('message', r); prober.postMessage('stop'); });
    await prober.terminate();
    row.q_state = await timeIt('/ncmp/v1/ch/id-searches', stateQ);

    // de-registration
    cpu0 = cpuSeconds(proc.pid);
    t0 = performance.now();
    await pool(batches.map((b) => async () => {
      const r = await post(url, '/ncmpInventory/v1/ch', { dmiPlugin: dmi.url, removedCmHandles: b });
      if (r.status !== 200) throw new Error(`removal: ${r.status} ${r.text.slice(0, 200)}`);
    }), CLIENTS);
    row.dereg_s = (performance.now() - t0) / 1000;
    row.dereg_cpu = cpuSeconds(proc.pid) - cpu0;
    const s = await status(url);
    row.left = `${s.cm_handles} handles, ${s.module_sets} sets, ${s.modules} modules`;
    row.rss = hwmMiB(proc.pid);
    row.load1 = loadavg()[0];
    return row;
  } finally {
    proc.kill('SIGTERM');
    await new Promise((r) => proc.on('exit', r));
    await dmi.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

const f = (x, d = 1) => x.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d });
console.log('| scenario | handles | tags | acked (s) | to READY (s) | handles/s to READY | plugin requests | opsd CPU reg (s, µs/handle) | id-search by module (ms, hits) | search by property (ms, hits) | slowest /healthz during it (ms), opsd loop lag (ms) | id-search by state (ms, hits) | de-registration (s) | de-registrations/s | opsd CPU dereg (s, µs/handle) | left after | peak RSS (MiB) | load avg start/end |');
console.log('| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- |');
for (const name of scenarios) {
  const r = await scenario(name);
  console.log(`| ${r.name} | ${r.n.toLocaleString('en-US')} | ${r.tags} | ${f(r.acked_s, 2)} | ${f(r.ready_s, 2)} | ${f(r.n / r.ready_s, 0)} | ${r.fetches} | ${f(r.reg_cpu, 2)} (${f(r.reg_cpu / r.n * 1e6, 1)}) | ${f(r.q_mod.ms)} (${r.q_mod.count}) | ${f(r.q_prop.ms)} (${r.q_prop.count}) | ${f(r.health_max)}, ${f(r.loop_lag)} | ${f(r.q_state.ms)} (${r.q_state.count}) | ${f(r.dereg_s, 2)} | ${f(r.n / r.dereg_s, 0)} | ${f(r.dereg_cpu, 2)} (${f(r.dereg_cpu / r.n * 1e6, 1)}) | ${r.left} | ${f(r.rss, 0)} | ${f(r.load0, 1)}/${f(r.load1, 1)} |`);
}

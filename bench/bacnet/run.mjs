// BACnet/IP driver benchmark: the issue's L1 over BACnet, end to end, and the polling maximum.
//
//   node bench/bacnet/run.mjs [--quick] [--opsd PATH]
//
// Devices: 20 simulated BACnet/IP devices x 250 analog inputs (5,000 points), each on its own
// UDP port on 127.0.0.1, built on the npm library @bacnet-js/client (the integration test's
// tests/integration/lib/bacnet_device.mjs). Every second, on the second, each device sets all
// its values to the time of the change (seconds since the run began, millisecond resolution,
// a REAL), so a client can tell how old a value is: latency = receipt - change time.
//
// Scenarios (opsd started fresh for each, its own config and data dir under a temp dir):
//   L1 poll   ReadPropertyMultiple every 1 s; 4 WebSocket clients, prefix subscription, 1 s
//   L1 COV    every object subscribed (confirmed notifications); devices notify each change
//   max poll  poll period 100 ms (asks for 50,000 objects/s): objects/s actually read
// Figures: values delivered/s to the clients, latency percentiles (change on the device ->
// WebSocket client), samples/s into the point table, opsd CPU (utime+stime from /proc over the
// window, 100 % = one core), peak RSS, skipped polls, driver errors. Everything runs on
// 127.0.0.1 and every process it starts is stopped at the end.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..', '..');
const itDir = join(root, 'tests', 'integration');
const { startBacnetDevice, freeUdpPort } = await import(join(itDir, 'lib', 'bacnet_device.mjs'));
const WebSocket = createRequire(join(itDir, 'package.json'))('ws');

const args = process.argv.slice(2);
const quick = args.includes('--quick');
const opsdBin = args.includes('--opsd') ? args[args.indexOf('--opsd') + 1] : process.env.OPSD_BIN || join(root, 'build-bench', 'opsd');
const NDEV = 20, NOBJ = 250;
const WARMUP = quick ? 4000 : 8000, WINDOW = quick ? 10000 : 30000;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const t0 = Date.now();

function freeTcpPort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

function cpuTicks(pid) {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return Number(f[11]) + Number(f[12]); // utime + stime, clock ticks (100/s)
}
const peakRss = (pid) => (readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmHWM:\s+(\d+)/) || [0, 0])[1] / 1024;

async function getJson(port, path) {
  const r = await fetch(`http://127.0.0.1:${port}${path}`, { signal: AbortSignal.timeout(10000) });
  return r.json();
}

async function scenario(name, devs, { poll, cov, confirmed = true, clients, interval = '1s' }) {
  const work = mkdtempSync(join(tmpdir(), 'opsd-bench-bacnet.'));
  const port = await freeTcpPort();
  const bind = await freeUdpPort();
  const devLines = devs.map((d, k) => `      - {instance: ${d.instance}, name: d${k}, address: 127.0.0.1:${d.port}, max_apdu: 1476` +
    `${cov ? `, cov: true, cov_limit: ${NOBJ}` : ''}, max_in_flight: 4}`).join('\n');
  const ptLines = devs.map((d, k) => `      - {name: "ai-${String(k).padStart(2, '0')}-{000..${NOBJ - 1}}", device: ${d.instance}, ` +
    `object: "analog-input:{0..${NOBJ - 1}}"}`).join('\n');
  const cfg = join(work, 'opsd.yaml');
  writeFileSync(cfg, `server:
  listen: 127.0.0.1:${port}
  data_dir: ${join(work, 'data')}
  log_level: warn
drivers:
  - type: bacnet
    name: bms
    bind: 127.0.0.1:${bind}
    timeout: 2s
    retries: 1
    poll: ${poll}
    cov_lifetime: 10m
    cov_confirmed: ${confirmed}
    devices:
${devLines}
    points:
${ptLines}
`);
  const proc = spawn(opsdBin, ['--config', cfg], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  proc.stderr.on('data', (b) => { log += b; });
  try {
    let up = false;
    for (let i = 0; i < 100 && !up; i++) {
      await sleep(100);
      up = await fetch(`http://127.0.0.1:${port}/healthz`).then((r) => r.ok, () => false);
    }
    if (!up) throw new Error(`opsd did not start: ${log.slice(-500)}`);

    const lat = [], latOpsd = [];
    let delivered = 0, counting = false;
    const socks = [];
    for (let c = 0; c < clients; c++) {
      const ws = new WebSocket(`ws://127.0.0.1:${port}/api/v1/stream`);
      await new Promise((res, rej) => { ws.on('open', res); ws.on('error', rej); });
      ws.on('message', (data) => {
        const now = Date.now();
        const m = JSON.parse(data);
        if (m.op !== 'update' || !counting) return;
        for (const v of m.values) {
          if (typeof v[1] !== 'number') continue;
          delivered++;
          if (c === 0) {
            lat.push(now - (t0 + v[1] * 1000));
            latOpsd.push(now - v[2]); // from opsd's receipt of the value (its source time stamp)
          }
        }
      });
      ws.send(JSON.stringify({ op: 'subscribe', id: 's', prefix: 'ai-', interval }));
      socks.push(ws);
    }
    await sleep(WARMUP);
    const h0 = await getJson(port, '/api/v1/drivers/bms');
    const c0 = cpuTicks(proc.pid);
    const n0 = process.cpuUsage();
    const w0 = Date.now();
    counting = true;
    await sleep(WINDOW);
    counting = false;
    const secs = (Date.now() - w0) / 1000;
    const c1 = cpuTicks(proc.pid);
    const n1 = process.cpuUsage(n0);
    const h1 = await getJson(port, '/api/v1/drivers/bms');
    socks.forEach((s) => s.close());
    lat.sort((a, b) => a - b);
    latOpsd.sort((a, b) => a - b);
    const pct = (p, l = lat) => (l.length ? l[Math.min(l.length - 1, Math.floor(l.length * p))] : NaN);
    const connected = h1.devices.filter((x) => x.connected).length;
    return {
      name,
      delivered: delivered / secs,
      samples: (h1.samples - h0.samples) / secs,
      p50: pct(0.5), p99: pct(0.99), max: lat.length ? lat[lat.length - 1] : NaN,
      o50: pct(0.5, latOpsd), o99: pct(0.99, latOpsd),
      cpu: ((c1 - c0) / 100 / secs) * 100,
      simCpu: ((n1.user + n1.system) / 1e6 / secs) * 100,
      rss: peakRss(proc.pid),
      skipped: h1.skipped - h0.skipped,
      errors: h1.errors - h0.errors,
      connected,
    };
  } finally {
    proc.kill('SIGTERM');
    await new Promise((r) => { const t = setTimeout(() => { proc.kill('SIGKILL'); r(); }, 5000); proc.on('exit', () => { clearTimeout(t); r(); }); });
    rmSync(work, { recursive: true, force: true });
  }
}

// Devices: values change on every second to the change time.
const devs = [];
for (let k = 0; k < NDEV; k++) devs.push(await startBacnetDevice({ instance: 5000 + k, objects: NOBJ, covLimit: NOBJ }));
let notifyOnChange = false;
let ticker;
const tick = () => {
  const now = Date.now();
  const v = Math.round(now - t0) / 1000;
  for (const d of devs) {
    for (let i = 0; i < NOBJ; i++) {
      d.values[i] = v;
      if (notifyOnChange) d.notify(i);
    }
  }
  ticker = setTimeout(tick, 1000 - (Date.now() % 1000));
};
ticker = setTimeout(tick, 1000 - (Date.now() % 1000));

const results = [];
try {
  results.push(await scenario('L1 poll (5,000 AI, 20 devices, poll 1 s, 4 clients, interval 1 s)', devs,
    { poll: '1s', cov: false, clients: 4 }));
  results.push(await scenario('L1 poll, clients at interval 100 ms', devs, { poll: '1s', cov: false, clients: 4, interval: '100ms' }));
  notifyOnChange = true;
  results.push(await scenario('L1 COV (unconfirmed notifications), interval 100 ms', devs,
    { poll: '1s', cov: true, confirmed: false, clients: 4, interval: '100ms' }));
  results.push(await scenario('L1 COV (confirmed notifications, acknowledged), interval 100 ms', devs,
    { poll: '1s', cov: true, confirmed: true, clients: 4, interval: '100ms' }));
  notifyOnChange = false;
  results.push(await scenario('max poll (5,000 AI, poll 100 ms, 1 client)', devs, { poll: '100ms', cov: false, clients: 1 }));
} finally {
  clearTimeout(ticker);
  devs.forEach((d) => d.close());
}

const f = (x, d = 0) => (Number.isFinite(x) ? x.toFixed(d) : '-');
console.log(`\nopsd: ${opsdBin}; window ${WINDOW / 1000} s after ${WARMUP / 1000} s warm-up\n`);
console.log('| scenario | values/s to clients | samples/s into opsd | latency p50 / p99 / max (ms) | of which opsd to client p50 / p99 | opsd CPU | peak RSS | skipped polls | errors | devices up | simulator+clients CPU |');
console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |');
for (const r of results) {
  console.log(`| ${r.name} | ${f(r.delivered)} | ${f(r.samples)} | ${f(r.p50)} / ${f(r.p99)} / ${f(r.max)} | ${f(r.o50)} / ${f(r.o99)} | ${f(r.cpu, 1)} % | ${f(r.rss, 1)} MiB | ${r.skipped} | ${r.errors} | ${r.connected}/${NDEV} | ${f(r.simCpu, 0)} % |`);
}
process.exit(0);

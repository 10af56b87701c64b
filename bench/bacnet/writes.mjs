// BACnet/IP writes with confirmation: how many WriteProperty requests opsd completes per second
// through PUT /api/v1/points/{name}, each answered only after the device's SimpleACK.
//
//   node bench/bacnet/writes.mjs [--opsd PATH] [--seconds N] [--clients N]
//
// One simulated device (tests/integration/lib/bacnet_device.mjs, @bacnet-js/client) with 100
// commandable analog values, opsd polling it at 1 s; N HTTP clients (default 16) each write
// their own points in a loop (a value, then the next as soon as the answer came) for the
// window. Prints writes/s, answer latency percentiles, failures, opsd CPU (utime+stime from
// /proc over the window, 100 % = one core) and the writes the device saw. Everything runs on
// 127.0.0.1; the processes it starts are stopped at the end.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..', '..');
const { startBacnetDevice, freeUdpPort } = await import(join(root, 'tests', 'integration', 'lib', 'bacnet_device.mjs'));
const args = process.argv.slice(2);
const opt = (k, d) => (args.includes(k) ? args[args.indexOf(k) + 1] : d);
const opsdBin = opt('--opsd', join(root, 'build-rel', 'opsd'));
const secs = Number(opt('--seconds', 10));
const clients = Number(opt('--clients', 16));
const NAV = 100;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const freePort = () => new Promise((res) => { const s = createServer(); s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => res(port)); }); });
const cpu = (pid) => { const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' '); return (Number(f[11]) + Number(f[12])) / 100; };

const dir = mkdtempSync(join(tmpdir(), 'opsd-bench-bacnet-writes.'));
const dev = await startBacnetDevice({ instance: 7007, objects: 1, avs: NAV });
const port = await freePort();
const bind = await freeUdpPort();
writeFileSync(join(dir, 'opsd.yaml'), `server:
  listen: 127.0.0.1:${port}
  data_dir: ${join(dir, 'data')}
  log_level: warn
drivers:
  - type: bacnet
    name: bms
    bind: 127.0.0.1:${bind}
    timeout: 1s
    poll: 1s
    devices:
      - {instance: 7007, address: 127.0.0.1:${dev.port}, max_apdu: 1476}
    points:
      - {name: "sp{0..${NAV - 1}}", device: 7007, object: "analog-value:{0..${NAV - 1}}", writable: true, priority: 8}
`);
const opsd = spawn(opsdBin, ['--config', join(dir, 'opsd.yaml')], { stdio: ['ignore', 'ignore', 'inherit'] });
const url = `http://127.0.0.1:${port}`;
for (let i = 0; i < 100; i++) {
  try { if ((await fetch(`${url}/healthz`)).ok) break; } catch { /* not yet */ }
  await sleep(100);
}
await sleep(1500); // the first poll

const lat = [];
let ok = 0, failed = 0, stop = false;
async function client(c) {
  let v = 0;
  while (!stop) {
    const name = `sp${(c + clients * (v % Math.ceil(NAV / clients))) % NAV}`;
    const t = performance.now();
    const r = await fetch(`${url}/api/v1/points/${name}`, { method: 'PUT', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ value: v++ }) });
    await r.arrayBuffer();
    if (r.status === 200) { ok++; lat.push(performance.now() - t); } else failed++;
  }
}
const c0 = cpu(opsd.pid), w0 = dev.writes.length, t0 = performance.now();
const runs = Array.from({ length: clients }, (_, c) => client(c));
await sleep(secs * 1000);
stop = true;
await Promise.all(runs);
const el = (performance.now() - t0) / 1000, used = cpu(opsd.pid) - c0;
lat.sort((a, b) => a - b);
const pct = (p) => (lat.length ? lat[Math.min(lat.length - 1, Math.floor(lat.length * p))].toFixed(2) : null);
console.log(JSON.stringify({ what: `BACnet WriteProperty through PUT, ${clients} clients, ${NAV} analog values`,
  writes_per_s: Math.round(ok / el), failed, p50_ms: pct(0.5), p99_ms: pct(0.99), opsd_cpu_pct: Math.round((used / el) * 100),
  device_saw: dev.writes.length - w0 }));
opsd.kill('SIGTERM');
dev.close();
await sleep(300);
rmSync(dir, { recursive: true, force: true });
process.exit(0);

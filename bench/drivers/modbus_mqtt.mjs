// bench/drivers/modbus_mqtt.mjs - the maximum the Modbus TCP and MQTT drivers take in:
// Modbus registers read per second and MQTT messages consumed per second, with opsd's CPU.
//
//   node bench/drivers/modbus_mqtt.mjs BUILD_DIR [SECONDS]
//
// Modbus: M servers (the npm package modbus-serial, each in its own node process) with R
// holding registers each; opsd polls every one at period 10 ms (one connection per server,
// requests of 125 registers). MQTT: mosquitto on its own port, P publishers (node, npm
// `mqtt`, QoS 0, each in its own process) sending numeric payloads round robin over T topics
// as fast as the broker takes them; opsd maps every topic to a point. Each part prints
// samples/s into the point table (opsd_driver_samples_total), opsd's CPU (utime+stime from
// /proc) and, for MQTT, the messages the publishers sent. Not a test: the numbers go to
// bench/RESULTS.md.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';

const here = fileURLToPath(new URL('.', import.meta.url));
const nm = resolve(here, '../../tests/integration/node_modules');
const build = resolve(process.argv[2] || 'build');
const secs = Number(process.argv[3] || 10);
const dir = mkdtempSync(join(tmpdir(), 'opsd-bench-drivers.'));
const procs = [];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const freePort = () => new Promise((res) => { const s = createServer(); s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => res(port)); }); });
const ticks = Number(process.env.CLK_TCK || 100);

function cpuSeconds(pid) {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(f[11]) + Number(f[12])) / ticks;
}

async function metric(port, name) {
  const t = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  let sum = 0;
  for (const l of t.split('\n')) if (l.startsWith(name)) sum += Number(l.slice(l.lastIndexOf(' ') + 1));
  return sum;
}

function child(code, args) {
  const p = spawn(process.execPath, ['--input-type=module', '-e', code, ...args], {
    stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, NODE_PATH: nm }, cwd: resolve(here, '../../tests/integration'),
  });
  procs.push(p);
  return p;
}

async function startOpsd(yaml) {
  const port = await freePort();
  const cfg = join(dir, `opsd-${port}.yaml`);
  writeFileSync(cfg, `server:\n  listen: 127.0.0.1:${port}\n  data_dir: ${join(dir, `data-${port}`)}\n${yaml}`);
  const p = spawn(join(build, 'opsd'), ['--config', cfg, '--log-level', 'warn'], { stdio: ['ignore', 'ignore', 'inherit'] });
  procs.push(p);
  for (let i = 0; i < 100; i++) {
    try { if ((await fetch(`http://127.0.0.1:${port}/healthz`)).ok) return { p, port }; } catch { /* not yet */ }
    await sleep(100);
  }
  throw new Error('opsd did not start');
}

async function measure(o, what) {
  await sleep(2000); // warm up
  const s0 = await metric(o.port, 'opsd_driver_samples_total');
  const c0 = cpuSeconds(o.p.pid);
  const t0 = Date.now();
  await sleep(secs * 1000);
  const s1 = await metric(o.port, 'opsd_driver_samples_total');
  const c1 = cpuSeconds(o.p.pid);
  const dt = (Date.now() - t0) / 1000;
  const r = { what, samples_per_s: Math.round((s1 - s0) / dt), opsd_cpu_pct: Math.round(((c1 - c0) / dt) * 100),
    skipped: await metric(o.port, 'opsd_driver_polls_skipped_total'), dropped: await metric(o.port, 'opsd_driver_dropped_total') };
  return r;
}

const MB_SERVER = `
import ModbusRTU from 'modbus-serial';
const [port, n] = process.argv.slice(-2).map(Number);
const regs = new Array(n).fill(0).map((_, i) => i);
setInterval(() => { for (let i = 0; i < n; i++) regs[i] = (regs[i] + 1) & 0xffff; }, 10);
new ModbusRTU.ServerTCP({
  getMultipleHoldingRegisters: (a, l, u, cb) => cb(null, regs.slice(a, a + l)),
  getHoldingRegister: (a, u, cb) => cb(null, regs[a]),
}, { host: '127.0.0.1', port, unitID: 255 });
`;

const PUBLISHER = `
import mqtt from 'mqtt';
const [port, topics, id] = process.argv.slice(-3).map(Number);
const c = mqtt.connect('mqtt://127.0.0.1:' + port, { clientId: 'bench-pub-' + id });
let sent = 0, v = 0;
c.on('connect', () => {
  const step = () => {
    for (let k = 0; k < 200; k++) { c.publish('bench/t' + ((sent + id) % topics), String(v++ % 1000 / 10), { qos: 0 }); sent++; }
    if (c.stream.writableNeedDrain) c.stream.once('drain', step); else setImmediate(step);
  };
  step();
});
process.on('SIGTERM', () => { process.stdout.write('SENT ' + sent + '\\n'); process.exit(0); });
`;

async function benchModbus(servers, regsPer) {
  const ports = [];
  for (let i = 0; i < servers; i++) {
    const port = await freePort();
    ports.push(port);
    child(MB_SERVER, [String(port), String(regsPer)]);
  }
  await sleep(1500);
  const drv = ports.map((port, i) => `  - type: modbus
    name: mb${i}
    host: 127.0.0.1
    port: ${port}
    period: 10ms
    timeout: 1s
    points:
      - {name: "mb${i}-r{0000..${String(regsPer - 1).padStart(4, '0')}}", type: int, table: holding, address: 0, data: uint16}
`).join('');
  const o = await startOpsd(`drivers:\n${drv}`);
  const r = await measure(o, `modbus ${servers} servers x ${regsPer} registers, period 10ms`);
  o.p.kill('SIGTERM');
  return r;
}

async function benchMqtt(pubs, topics) {
  const port = await freePort();
  const conf = join(dir, 'mosquitto.conf');
  writeFileSync(conf, `listener ${port} 127.0.0.1\nallow_anonymous true\npersistence false\nmax_queued_messages 100000\n`);
  const broker = spawn('/usr/sbin/mosquitto', ['-c', conf], { stdio: 'ignore' });
  procs.push(broker);
  await sleep(500);
  const o = await startOpsd(`drivers:
  - type: mqtt
    name: mq
    host: 127.0.0.1
    port: ${port}
    qos: 0
    points:
      - {name: "mq-t{0..${topics - 1}}", type: double, topic: "bench/+", point: "mq-$1"}
`);
  await sleep(500);
  const ps = [];
  for (let i = 0; i < pubs; i++) ps.push(child(PUBLISHER, [String(port), String(topics), String(i)]));
  const bc0 = cpuSeconds(broker.pid);
  const t0 = Date.now();
  const r = await measure(o, `mqtt ${pubs} publishers, ${topics} topics (wildcard + template), QoS 0`);
  r.broker_cpu_pct = Math.round(((cpuSeconds(broker.pid) - bc0) / ((Date.now() - t0) / 1000)) * 100);
  let sent = 0;
  await Promise.all(ps.map((p) => new Promise((res) => {
    let out = '';
    p.stdout.on('data', (b) => { out += b; });
    p.on('exit', () => { const m = out.match(/SENT (\d+)/); if (m) sent += Number(m[1]); res(); });
    p.kill('SIGTERM');
  })));
  r.published_total = sent;
  o.p.kill('SIGTERM');
  broker.kill('SIGTERM');
  return r;
}

try {
  console.log(JSON.stringify(await benchModbus(4, 2000)));
  for (const p of procs) if (p.exitCode === null) p.kill('SIGTERM');
  await sleep(500);
  console.log(JSON.stringify(await benchMqtt(2, 1000)));
} finally {
  for (const p of procs) if (p.exitCode === null) p.kill('SIGTERM');
  await sleep(300);
  rmSync(dir, { recursive: true, force: true });
}

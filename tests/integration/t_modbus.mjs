// Modbus TCP driver against a real server no one here wrote: the npm package `modbus-serial`
// (ServerTCP) on a loopback port. Covers the four tables, data types with word order, scale
// and offset, a bit of a register, exception replies (one point bad, the rest good), reads
// grouped into contiguous requests, writes through PUT /api/v1/points (registers, coils,
// refusals), health in GET /api/v1/drivers and /metrics, and faults: the server stopped
// (points bad with the reason, connected false) and restarted (good again), and a server
// that stops answering (timeouts). docs/drivers.md "Modbus TCP".
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test, finish, assert, assertEq, sleep, failTest } from './lib/harness.mjs';
import { workDir, startOpsd, http, metrics, freePort } from './lib/opsd.mjs';
import { ModbusServer } from './lib/modbus_server.mjs';

const work = workDir('t_modbus');
const mbPort = await freePort();
const srv = new ModbusServer({ port: mbPort, size: 100 });

// Register contents (unit 1), written in the protocol's big-endian words.
function setFloat32(regs, addr, v, wordSwap = false) {
  const b = Buffer.alloc(4);
  b.writeFloatBE(v);
  const w = [b.readUInt16BE(0), b.readUInt16BE(2)];
  if (wordSwap) w.reverse();
  regs[addr] = w[0];
  regs[addr + 1] = w[1];
}
const u1 = srv.unit(1);
u1.holding[0] = 100;
u1.holding[1] = 0xFFFF; // int16 -1
u1.holding[2] = 7;
u1.holding[3] = 0x8000; // int16 -32768
setFloat32(u1.holding, 10, 1.5);
setFloat32(u1.holding, 12, -2.5, true);
u1.holding[14] = 0xEE6B; // uint32 4000000000 = 0xEE6B2800
u1.holding[15] = 0x2800;
u1.holding[20] = 0x0008; // bit 3 set
u1.input[0] = 655;       // 65.5 - 40 = 25.5
u1.coils[1] = true;
u1.discrete[6] = true;
srv.unit(2).holding[0] = 4242;

await srv.start();

const config = (port, dataDir) => `server:
  listen: 127.0.0.1:${port}
  data_dir: ${dataDir}
drivers:
  - type: modbus
    name: plc
    host: 127.0.0.1
    port: ${mbPort}
    period: 200ms
    timeout: 300ms
    backoff_max: 1s
    points:
      - {name: "mb-hr-{0..3}", type: int, table: holding, address: 0, data: int16, writable: true}
      - {name: "mb-f32", type: double, table: holding, address: 10, data: float32}
      - {name: "mb-f32le", type: double, table: holding, address: 12, data: float32, word_order: little}
      - {name: "mb-u32", type: int, table: holding, address: 14, data: uint32}
      - {name: "mb-f64", type: double, table: holding, address: 16, data: float64, writable: true}
      - {name: "mb-bit", type: bool, table: holding, address: 20, bit: 3}
      - {name: "mb-temp", type: double, unit: degC, table: input, address: 0, data: int16, scale: 0.1, offset: -40}
      - {name: "mb-coil-{0..2}", type: bool, table: coil, address: 0, writable: true}
      - {name: "mb-di-{0..1}", type: bool, table: discrete, address: 5}
      - {name: "mb-u2", type: int, table: holding, address: 0, data: uint16, unit_id: 2}
      - {name: "mb-u3", type: int, table: holding, address: 0, data: uint16, unit_id: 3}
      - {name: "mb-missing", type: int, table: holding, address: 150, data: uint16}
`;

let d;
try {
  d = await startOpsd(work, { config });
} catch (e) {
  failTest('modbus: opsd starts', e.message);
  work.keep = true;
  await srv.stop();
  await finish();
}

const point = async (name) => (await http(d, 'GET', `/api/v1/points/${name}`)).json;
const health = async () => (await http(d, 'GET', '/api/v1/drivers/plc')).json;

async function waitFor(what, fn, ms = 5000) {
  const end = Date.now() + ms;
  let last;
  for (;;) {
    last = await fn();
    if (last && last.ok) return last;
    if (Date.now() > end) throw new Error(`${what}: not within ${ms} ms (last: ${JSON.stringify(last && last.info)})`);
    await sleep(50);
  }
}
const waitPoint = (name, pred, ms) => waitFor(`point ${name}`, async () => {
  const p = await point(name);
  return { ok: p && pred(p), info: p };
}, ms);

await test('modbus: values of every table and data type are read', async () => {
  await waitPoint('mb-temp', (p) => p.quality === 'good');
  const want = {
    'mb-hr-0': 100, 'mb-hr-1': -1, 'mb-hr-2': 7, 'mb-hr-3': -32768, 'mb-f32': 1.5, 'mb-f32le': -2.5,
    'mb-u32': 4000000000, 'mb-bit': true, 'mb-coil-0': false, 'mb-coil-1': true, 'mb-di-0': false,
    'mb-di-1': true, 'mb-u2': 4242,
  };
  for (const [name, v] of Object.entries(want)) {
    const p = await point(name);
    assertEq(p.quality, 'good', `${name} quality`);
    assertEq(p.value, v, `${name} value`);
  }
  const t = await point('mb-temp');
  assert(Math.abs(t.value - 25.5) < 1e-9, `scale and offset: mb-temp is ${t.value}, want 25.5`);
  assertEq(t.unit, 'degC', 'unit of mb-temp');
});

await test('modbus: an exception reply turns only its points bad, with the reason', async () => {
  const p = await waitPoint('mb-missing', (x) => x.quality === 'bad' && /illegal data address/i.test(x.reason || ''));
  assert(p.info || true, '');
  assertEq((await point('mb-hr-0')).quality, 'good', 'a point of another request');
});

await test('modbus: a unit behind a gateway that does not answer fails alone', async () => {
  srv.unreachable.add(3);
  const p = await waitPoint('mb-u3', (x) => x.quality === 'bad' && /failed to respond/i.test(x.reason || ''));
  assert(p.info.reason.startsWith(`127.0.0.1:${mbPort} unit 3: `), `reason names the unit: ${p.info.reason}`);
  const h = await health();
  const u3 = h.devices.find((x) => x.name.endsWith('unit 3'));
  assert(u3.errors > 0 && /failed to respond/i.test(u3.last_error), `unit 3 health: ${JSON.stringify(u3)}`);
  const u1h = h.devices.find((x) => x.name.endsWith('unit 1'));
  // unit 1's own errors are the exception replies to mb-missing's request, nothing of unit 3
  assert(u1h.connected && /Illegal data address/.test(u1h.last_error), `unit 1 health: ${JSON.stringify(u1h)}`);
  assertEq((await point('mb-u2')).quality, 'good', 'unit 2 point');
  srv.unreachable.delete(3);
  await waitPoint('mb-u3', (x) => x.quality === 'good');
});

await test('modbus: reads are grouped into contiguous requests', async () => {
  // unit 1 holding 0..3 (4), 10..20 (float32, float32, uint32, float64, a bit: 11), 150 (1);
  // input 0 (1); units 2 and 3 holding 0 (1 each)
  const want = ['3:1:0:4', '3:1:10:11', '3:1:150:1', '4:1:0:1', '3:2:0:1', '3:3:0:1'].sort();
  srv.requests.length = 0;
  const end = Date.now() + 3000; // at least two scans at 200 ms, however loaded the machine
  while (srv.requests.length < 2 * want.length && Date.now() < end) await sleep(50);
  const seen = [...new Set(srv.requests.map((r) => r.join(':')))].sort();
  assertEq(seen, want, 'distinct register reads');
  assert(srv.requests.length >= 2 * want.length, `two scans within 3 s (saw ${srv.requests.length} reads)`);
});

await test('modbus: health in GET /api/v1/drivers and /metrics (one device per unit id)', async () => {
  const h = await health();
  assertEq(h.type, 'modbus', 'type');
  assertEq(h.connected, true, 'connected');
  assertEq(h.devices.map((x) => x.name), [1, 2, 3].map((u) => `127.0.0.1:${mbPort} unit ${u}`), 'devices');
  const dev = h.devices[0];
  assert(dev.requests > 0 && typeof dev.rtt_ms === 'number' && dev.rtt_ms >= 0, `requests and rtt: ${JSON.stringify(dev)}`);
  assert(Math.abs(dev.last_success - Date.now()) < 5000, `last_success ${dev.last_success}`);
  assertEq(dev.points, 16, 'points of unit 1');
  assertEq(h.devices[1].points, 1, 'points of unit 2');
  const all = (await http(d, 'GET', '/api/v1/drivers')).json;
  assert(all.drivers.some((x) => x.name === 'plc'), 'listed in /api/v1/drivers');
  assertEq((await http(d, 'GET', '/api/v1/drivers/nope')).status, 404, 'unknown driver');
  const m = await metrics(d);
  const lbl = `{driver="plc",device="127.0.0.1:${mbPort} unit 1"}`;
  assertEq(m.get(`opsd_driver_device_connected${lbl}`), 1, 'connected metric');
  assert(m.get(`opsd_driver_device_requests_total${lbl}`) > 0, 'requests metric');
  assert(m.get(`opsd_driver_device_rtt_seconds${lbl}`) >= 0, 'rtt metric');
});

await test('modbus: writes go to the server (int16, float64, coil) and read back', async () => {
  let r = await http(d, 'PUT', '/api/v1/points/mb-hr-1', { value: -7 });
  assertEq(r.status, 200, `PUT int16: ${r.text}`);
  assertEq(r.json.written, true, 'written');
  assertEq(u1.holding[1], 0xFFF9, 'register 1 holds -7 as int16');
  await waitPoint('mb-hr-1', (p) => p.value === -7);
  r = await http(d, 'PUT', '/api/v1/points/mb-f64', { value: 1234.5678 });
  assertEq(r.status, 200, `PUT float64: ${r.text}`);
  const b = Buffer.alloc(8);
  for (let i = 0; i < 4; i++) b.writeUInt16BE(u1.holding[16 + i], 2 * i);
  assertEq(b.readDoubleBE(0), 1234.5678, 'registers 16..19 hold the float64');
  await waitPoint('mb-f64', (p) => p.value === 1234.5678);
  r = await http(d, 'PUT', '/api/v1/points/mb-coil-2', { value: true });
  assertEq(r.status, 200, `PUT coil: ${r.text}`);
  assertEq(u1.coils[2], true, 'coil 2 set');
  await waitPoint('mb-coil-2', (p) => p.value === true);
});

await test('modbus: writes that cannot be done are refused and change nothing', async () => {
  let r = await http(d, 'PUT', '/api/v1/points/mb-hr-2', { value: 40000 });
  assertEq(r.status, 409, `out of the int16 range: ${r.text}`);
  assert(/range/.test(r.json.error.message), `reason: ${r.json.error.message}`);
  assertEq(u1.holding[2], 7, 'register 2 unchanged');
  r = await http(d, 'PUT', '/api/v1/points/mb-temp', { value: 1 });
  assertEq(r.status, 409, 'an input register is not writable');
  r = await http(d, 'PUT', '/api/v1/points/mb-hr-2', { value: 'x' });
  assertEq(r.status, 400, 'wrong type');
  assertEq(u1.holding[2], 7, 'register 2 still unchanged');
});

await test('modbus: server stopped -> points bad with the reason, health disconnected', async () => {
  await srv.stop();
  const p = await waitPoint('mb-hr-0', (x) => x.quality === 'bad', 4000);
  assert(p.info.reason.includes(`127.0.0.1:${mbPort}`), `reason names the device: ${p.info.reason}`);
  for (const name of ['mb-f32', 'mb-coil-1', 'mb-di-1', 'mb-u2', 'mb-temp']) {
    const x = await point(name);
    assertEq(x.quality, 'bad', `${name} quality`);
  }
  const h = await health();
  assertEq(h.connected, false, 'driver connected');
  const dev = h.devices[0];
  assert(dev.errors > 0 && dev.last_error && dev.last_error_time, `errors recorded: ${JSON.stringify(dev)}`);
  const r = await http(d, 'PUT', '/api/v1/points/mb-hr-1', { value: 5 });
  assertEq(r.status, 502, `a write while the server is down: ${r.text}`);
  const m = await metrics(d);
  assertEq(m.get(`opsd_driver_device_connected{driver="plc",device="127.0.0.1:${mbPort} unit 1"}`), 0, 'connected metric');
});

await test('modbus: server restarted -> reconnects with back-off, points good again', async () => {
  await sleep(1500); // a few failed connects: the back-off grows to its cap (1 s)
  u1.holding[0] = 321;
  await srv.start();
  await waitPoint('mb-hr-0', (x) => x.quality === 'good' && x.value === 321, 4000);
  await waitPoint('mb-coil-1', (x) => x.quality === 'good');
  const h = await health();
  assertEq(h.connected, true, `connected again: ${JSON.stringify(h.devices)}`);
});

await test('modbus: a server that stops answering -> timeouts turn points bad, answers make them good', async () => {
  srv.silent = true;
  const p = await waitPoint('mb-f32', (x) => x.quality === 'bad', 4000);
  assert(/timed out|timeout/i.test(p.info.reason), `reason: ${p.info.reason}`);
  srv.silent = false;
  await waitPoint('mb-f32', (x) => x.quality === 'good', 5000);
  assert(d.exitInfo === null, 'opsd still running');
});

await test('modbus: invalid driver entries are refused with FILE:LINE and reason', async () => {
  const bad = `drivers:
  - type: modbus
    name: plc
    host: 127.0.0.1
    port: 70000
    points:
      - {name: "a", type: double, table: holdings, address: 0}
      - {name: "b", type: double, table: input, address: 0, writable: true}
      - {name: "c{0..9}", type: int, table: holding, address: 65530, data: int32}
      - {name: "d", type: bool, table: coil, address: 1, data: int16}
      - {name: "e", type: string, table: holding, address: 1}
      - {name: "f", type: bool, table: holding, address: 1, bit: 16}
`;
  const f = join(work.dir, 'bad.yaml');
  writeFileSync(f, bad);
  const r = spawnSync(process.env.OPSD, ['--check-config', f], { encoding: 'utf8' });
  assertEq(r.status, 1, 'exit status');
  for (const re of [/:5: .*port/, /:7: .*unknown table 'holdings'/, /:8: .*read-only/, /:9: .*past address 65535/,
    /:10: .*single bits/, /:11: .*double, int or bool/, /:12: .*bit/]) {
    assert(re.test(r.stderr), `${re} in: ${r.stderr}`);
  }
});

await test('modbus: a reload restarts the driver with its new points', async () => {
  const cfg = readFileSync(d.configPath, 'utf8').replace('period: 200ms', 'period: 100ms') +
    '      - {name: "mb-new", type: int, table: holding, address: 2, data: uint16}\n';
  writeFileSync(d.configPath, cfg);
  const p = await waitPoint('mb-new', (x) => x.quality === 'good', 5000);
  assertEq(p.info.value, 7, 'the new point reads register 2');
  const h = await health();
  assertEq(h.devices[0].points, 17, 'the new driver has the new point');
  assertEq((await point('mb-f32')).quality, 'good', 'the old points keep coming');
});

await test('modbus: etc/examples/modbus.yaml is a valid configuration', async () => {
  const f = new URL('../../etc/examples/modbus.yaml', import.meta.url).pathname;
  const r = spawnSync(process.env.OPSD, ['--check-config', f], { encoding: 'utf8' });
  assertEq(r.status, 0, `--check-config: ${r.stderr}`);
});

await test('modbus: SIGTERM stops the driver cleanly', async () => {
  const e = await d.stop('SIGTERM', 5000);
  assertEq(e.killed, false, 'stopped within 5 s');
  assertEq(e.code, 0, 'exit status');
  const rep = work.sanitizerReport();
  assert(!rep, `sanitizer: ${rep}`);
});

await srv.stop();
await finish();

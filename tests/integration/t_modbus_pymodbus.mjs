// Modbus driver against Debian's python3-pymodbus (lib/pymodbus_server.py), a server no one
// here wrote: Modbus TCP, and Modbus RTU over a pseudo-terminal pair made by socat (opsd on
// one end, pymodbus's serial server on the other). Units 1 and 2 on one connection or line,
// every table, a float32, an exception (02), writes read back, and (RTU) a unit that does not
// answer timing out alone while the others on the line stay good. docs/drivers.md "Modbus".
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { test, finish, assert, assertEq, sleep, failTest, onCleanup } from './lib/harness.mjs';
import { workDir, startOpsd, http, freePort } from './lib/opsd.mjs';

const PY = '/usr/bin/python3';
const SERVER = join(process.env.IT_DIR || '.', 'lib', 'pymodbus_server.py');
const work = workDir('t_modbus_pymodbus');

function run(cmd, args) {
  const p = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  p.log = '';
  p.stdout.on('data', (b) => { p.log += b; });
  p.stderr.on('data', (b) => { p.log += b; });
  onCleanup(() => { if (p.exitCode === null) p.kill('SIGKILL'); });
  return p;
}

async function until(cond, ms, what) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await cond()) return;
    await sleep(50);
  }
  throw new Error(`${what}: not within ${ms} ms`);
}

const points = (pfx) => `
      - {name: "${pfx}-u1-hr{0..3}", type: int, table: holding, address: 0, data: uint16}
      - {name: "${pfx}-u1-f", type: double, table: holding, address: 20, data: float32}
      - {name: "${pfx}-u1-w", type: int, table: holding, address: 30, data: uint16, writable: true}
      - {name: "${pfx}-u1-c{0..1}", type: bool, table: coil, address: 4, writable: true}
      - {name: "${pfx}-u1-di", type: bool, table: discrete, address: 7}
      - {name: "${pfx}-u1-ir", type: int, table: input, address: 9, data: uint16}
      - {name: "${pfx}-u1-bad", type: int, table: holding, address: 60, data: uint16}
      - {name: "${pfx}-u2-hr{0..1}", type: int, table: holding, address: 10, data: uint16, unit_id: 2}`;

let d, tcpPort, ttyA, ttyB;
try {
  tcpPort = await freePort();
  const tcp = run(PY, [SERVER, 'tcp', String(tcpPort)]);
  ttyA = join(work.dir, 'ttyA');
  ttyB = join(work.dir, 'ttyB');
  const socat = run('socat', [`pty,raw,echo=0,link=${ttyA}`, `pty,raw,echo=0,link=${ttyB}`]);
  await until(() => existsSync(ttyA) && existsSync(ttyB), 5000, `socat's pty pair (${socat.log})`);
  // parity none: a Linux pty refuses parity settings (tcsetattr EINVAL), on either side
  const rtu = run(PY, [SERVER, 'rtu', ttyB, '19200', 'N']);
  await until(() => /ready/.test(tcp.log) && /ready/.test(rtu.log), 10000, `pymodbus servers: ${tcp.log} ${rtu.log}`);
  d = await startOpsd(work, {
    config: (port, dataDir) => `server:
  listen: 127.0.0.1:${port}
  data_dir: ${dataDir}
drivers:
  - type: modbus
    name: tcp
    host: 127.0.0.1
    port: ${tcpPort}
    period: 200ms
    timeout: 500ms
    points:${points('t')}
  - type: modbus
    name: rtu
    device: ${ttyA}
    baud: 19200
    parity: none
    period: 300ms
    timeout: 300ms
    points:${points('r')}
      - {name: "r-u9", type: int, table: holding, address: 0, data: uint16, unit_id: 9}
`,
  });
} catch (e) {
  failTest('pymodbus: servers and opsd start', e.stack || e.message);
  work.keep = true;
  await finish();
}

const point = async (name) => (await http(d, 'GET', `/api/v1/points/${name}`)).json;
async function waitPoint(name, ok, ms = 5000) {
  let p;
  try {
    await until(async () => { p = await point(name); return p && ok(p); }, ms, name);
  } catch (e) {
    throw new Error(`${e.message} (last ${JSON.stringify(p)})`);
  }
  return p;
}

for (const [pfx, what] of [['t', 'TCP'], ['r', 'RTU']]) {
  await test(`${what}: every table of units 1 and 2, a float32 and an exception`, async () => {
    await waitPoint(`${pfx}-u2-hr1`, (p) => p.quality === 'good', 8000);
    const want = {
      [`${pfx}-u1-hr0`]: 100, [`${pfx}-u1-hr3`]: 103, [`${pfx}-u1-f`]: 21.5, [`${pfx}-u1-c0`]: false,
      [`${pfx}-u1-c1`]: true, [`${pfx}-u1-di`]: true, [`${pfx}-u1-ir`]: 1009, [`${pfx}-u2-hr0`]: 210, [`${pfx}-u2-hr1`]: 211,
    };
    for (const [n, v] of Object.entries(want)) {
      const p = await waitPoint(n, (x) => x.quality === 'good');
      assertEq(p.value, v, n);
    }
    const bad = await waitPoint(`${pfx}-u1-bad`, (p) => p.quality === 'bad');
    assertEq(bad.reason, 'Illegal data address', 'exception 02');
    const h = (await http(d, 'GET', `/api/v1/drivers/${what.toLowerCase()}`)).json;
    assertEq(h.malformed, 0, 'no malformed reply from pymodbus');
  });

  await test(`${what}: writes (register, coil) go to pymodbus and read back`, async () => {
    let r = await http(d, 'PUT', `/api/v1/points/${pfx}-u1-w`, { value: 4321 });
    assertEq(r.status, 200, r.text);
    r = await http(d, 'PUT', `/api/v1/points/${pfx}-u1-c0`, { value: true });
    assertEq(r.status, 200, r.text);
    await waitPoint(`${pfx}-u1-w`, (p) => p.value === 4321);
    await waitPoint(`${pfx}-u1-c0`, (p) => p.value === true);
    r = await http(d, 'PUT', `/api/v1/points/${pfx}-u1-w`, { value: 70000 });
    assertEq(r.status, 409, `out of range: ${r.text}`);
  });
}

await test('RTU: a unit that does not answer times out alone; the others on the line stay good', async () => {
  const p = await waitPoint('r-u9', (x) => x.quality === 'bad' && /timed out/i.test(x.reason || ''), 8000);
  assert(p.reason.startsWith(`${ttyA} unit 9: `), `reason names the line and unit: ${p.reason}`);
  assertEq((await point('r-u1-hr0')).quality, 'good', 'unit 1 good');
  assertEq((await point('r-u2-hr0')).quality, 'good', 'unit 2 good');
  const h = (await http(d, 'GET', '/api/v1/drivers/rtu')).json;
  const u9 = h.devices.find((x) => x.name.endsWith('unit 9'));
  assert(u9 && u9.errors > 0, `unit 9 health: ${JSON.stringify(u9)}`);
});

await finish();

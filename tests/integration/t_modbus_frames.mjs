// Modbus TCP driver against a server that corrupts its replies on request: a small raw
// Modbus TCP server in this file (node:net) that answers function 3 correctly, or with one
// field wrong. Every corrupt reply is refused: counted in the driver's `malformed`, the
// points of that request bad with the check that failed (never good with a value taken
// from a frame that does not belong to the request), the error logged once with the device's
// name; exceptions 02, 04 and 06 logged and counted. docs/drivers.md "Modbus".
import net from 'node:net';
import { spawnSync } from 'node:child_process';
import { test, finish, assert, assertEq, sleep, failTest } from './lib/harness.mjs';
import { workDir, startOpsd, http, freePort } from './lib/opsd.mjs';

const work = workDir('t_modbus_frames');
let mode = 'ok';
let served = 0;
const server = net.createServer((sock) => {
  let buf = Buffer.alloc(0);
  sock.on('data', (b) => {
    buf = Buffer.concat([buf, b]);
    while (buf.length >= 7 && buf.length >= 6 + buf.readUInt16BE(4)) {
      const len = 6 + buf.readUInt16BE(4);
      const req = buf.subarray(0, len);
      buf = buf.subarray(len);
      served++;
      const tid = req.readUInt16BE(0), unit = req[6], fc = req[7], addr = req.readUInt16BE(8), count = req.readUInt16BE(10);
      let pdu;
      if (/^exc/.test(mode)) {
        pdu = Buffer.from([fc | 0x80, Number(mode.slice(3))]);
      } else {
        pdu = Buffer.alloc(2 + 2 * count);
        pdu[0] = mode === 'fc' ? 4 : fc;
        pdu[1] = mode === 'count' ? 2 * count - 2 : 2 * count;
        for (let i = 0; i < count; i++) pdu.writeUInt16BE(1000 + addr + i, 2 + 2 * i);
      }
      const hdr = Buffer.alloc(7);
      hdr.writeUInt16BE(mode === 'tid' ? (tid + 1) & 0xffff : tid, 0);
      hdr.writeUInt16BE(mode === 'pid' ? 1 : 0, 2);
      hdr.writeUInt16BE(mode === 'len' ? 65535 : pdu.length + 1, 4);
      hdr[6] = mode === 'unit' ? unit + 1 : unit;
      sock.write(Buffer.concat([hdr, pdu]));
    }
  });
  sock.on('error', () => {});
});

let d, port;
try {
  port = await freePort();
  await new Promise((r) => server.listen(port, '127.0.0.1', r));
  d = await startOpsd(work, {
    config: (p, dataDir) => `server:
  listen: 127.0.0.1:${p}
  data_dir: ${dataDir}
drivers:
  - type: modbus
    name: plc
    host: 127.0.0.1
    port: ${port}
    period: 100ms
    timeout: 300ms
    backoff_max: 500ms
    points:
      - {name: "r{0..3}", type: int, table: holding, address: 10, data: uint16}
`,
  });
} catch (e) {
  failTest('modbus frames: server and opsd start', e.stack || e.message);
  await finish();
}

const point = async (name) => (await http(d, 'GET', `/api/v1/points/${name}`)).json;
const health = async () => (await http(d, 'GET', '/api/v1/drivers/plc')).json;

async function waitPoint(name, ok, ms, what) {
  const end = Date.now() + ms;
  let p;
  while (Date.now() < end) {
    p = await point(name);
    if (p && ok(p)) return p;
    await sleep(30);
  }
  throw new Error(`${what}: not reached within ${ms} ms (last ${JSON.stringify(p)})`);
}

await test('good replies: values read', async () => {
  const p = await waitPoint('r2', (x) => x.quality === 'good', 5000, 'r2 good');
  assertEq(p.value, 1012, 'r2 = register 12');
  assertEq((await health()).malformed, 0, 'nothing malformed');
});

const cases = [
  ['unit', /malformed reply: another unit id/],
  ['pid', /malformed reply: protocol id not 0/],
  ['len', /malformed reply: MBAP length outside 2\.\.254/],
  ['fc', /malformed reply: another function code/],
  ['tid', /malformed reply: another transaction id/],
  ['count', /malformed reply: byte count not what was asked for/],
];
for (const [m, re] of cases) {
  await test(`a reply with ${m} wrong is refused: counted, points bad with the reason, logged`, async () => {
    const before = (await health()).malformed;
    mode = m;
    const p = await waitPoint('r0', (x) => x.quality === 'bad' && re.test(x.reason || ''), 3000, `r0 bad (${m})`);
    assertEq(p.value, 1010, 'the last good value kept');
    const h = await health();
    assert(h.malformed > before, `malformed ${before} -> ${h.malformed}`);
    assert(re.test(h.devices[0].last_error) || /read failed/.test(h.devices[0].last_error),
      `last_error: ${h.devices[0].last_error}`);
    const log = d.log();
    assert(new RegExp(`device 127\\.0\\.0\\.1:${port}: .*${re.source}`).test(log), `logged with the device: ${re}`);
    mode = 'ok';
    await waitPoint('r0', (x) => x.quality === 'good', 3000, 'good again');
  });
}

await test('exceptions 02, 04 and 06: points bad with the text, logged once each and counted', async () => {
  for (const [code, text] of [[2, 'Illegal data address'], [4, 'Slave device or server failure'], [6, 'Slave device or server is busy']]) {
    const e0 = (await health()).devices[0].errors;
    mode = `exc${code}`;
    await waitPoint('r1', (x) => x.quality === 'bad' && x.reason === text, 3000, `exception ${code}`);
    await sleep(350);
    const h = await health();
    assert(h.devices[0].errors >= e0 + 2, `counted: ${e0} -> ${h.devices[0].errors}`);
    assert(h.devices[0].connected, 'the connection stays');
    const lines = d.log().split('\n').filter((l) => l.includes(`exception 0${code}: ${text}`));
    assertEq(lines.length, 1, `logged once: ${lines.join(' | ')}`);
    mode = 'ok';
    await waitPoint('r1', (x) => x.quality === 'good', 3000, 'good again');
  }
});

await test('opsctl drivers: counters and each device\'s health with its last error', async () => {
  const r = spawnSync(process.env.OPSCTL, ['--url', d.url, 'drivers', 'plc'], { encoding: 'utf8', timeout: 10000 });
  assertEq(r.status, 0, `exit status (${r.stderr})`);
  assert(/^plc \(modbus\) 4 points, connected, samples \d+, errors \d+, malformed [1-9]\d*, dropped 0, skipped \d+$/m
    .test(r.stdout), r.stdout);
  assert(new RegExp(`^  127\\.0\\.0\\.1:${port}  up +\\d+ requests, \\d+ errors`, 'm').test(r.stdout), r.stdout);
  assert(/last error at .*: holding 10\.\.13 of unit 1: exception 06/.test(r.stdout), r.stdout);
  const all = spawnSync(process.env.OPSCTL, ['--url', d.url, 'drivers', '--json'], { encoding: 'utf8', timeout: 10000 });
  assertEq(JSON.parse(all.stdout).drivers[0].name, 'plc', '--json');
  const none = spawnSync(process.env.OPSCTL, ['--url', d.url, 'drivers', 'nope'], { encoding: 'utf8', timeout: 10000 });
  assert(none.status !== 0 && /unknown_driver|no driver/i.test(none.stderr), `unknown driver: ${none.stderr}`);
});

server.close();
await finish();

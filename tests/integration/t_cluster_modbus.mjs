// One Modbus TCP device, two cluster nodes (a, c) that may poll it, on three real nats-server
// processes. A counting proxy in front of the device (npm modbus-serial's ServerTCP) records
// every request with its client connection. The owner a is frozen (SIGSTOP) past its lease:
// c takes the driver over and polls; once a resumes, no request arrives on a's connection
// after c's first one (the lease gate stops a's driver thread before it sends anything). Then
// the driver is moved back to a (opsctl cluster move) while a write is made: no request on
// c's connection after a's first, and the write reaches the device once.
// docs/cluster.md "Failure modes". Skips only when nats-server is not installed.
import { createServer, connect } from 'node:net';
import { test, finish, assert, assertEq, sleep, failTest, diag } from './lib/harness.mjs';
import { freePort, http } from './lib/opsd.mjs';
import { ModbusServer } from './lib/modbus_server.mjs';
import { LEASE_MS, setup, waitOwner, waitValue } from './lib/cluster.mjs';

const mbPort = await freePort();
const proxyPort = await freePort();
const srv = new ModbusServer({ port: mbPort, size: 10 });
srv.unit(1).holding[0] = 7;
await srv.start();

// The proxy: each client connection gets a number; requests are [connection, time, function].
const requests = [];
const sockets = new Set();
let nconn = 0;
const proxy = createServer((client) => {
  sockets.add(client);
  const id = ++nconn;
  const up = connect(mbPort, '127.0.0.1');
  let buf = Buffer.alloc(0);
  client.on('data', (b) => {
    buf = Buffer.concat([buf, b]);
    while (buf.length >= 6 && buf.length >= 6 + buf.readUInt16BE(4)) {
      requests.push([id, Date.now(), buf[7]]);
      buf = buf.subarray(6 + buf.readUInt16BE(4));
    }
    up.write(b);
  });
  up.on('data', (b) => client.write(b));
  const end = () => { client.destroy(); up.destroy(); };
  client.on('error', end);
  up.on('error', end);
  client.on('close', end);
  up.on('close', end);
});
await new Promise((r) => proxy.listen(proxyPort, '127.0.0.1', r));

const env = await setup('t_cluster_modbus', {
  candidates: ['a', 'c'],
  drivers: `  - type: modbus
    name: plc
    nodes: [a, c]
    host: 127.0.0.1
    port: ${proxyPort}
    period: 100ms
    timeout: 300ms
    points:
      - {name: "mb-0", type: int, table: holding, address: 0, data: uint16, writable: true}`,
});
const { work, nodes } = env;

await test('cluster modbus: a owns the Modbus driver, c mirrors its point, one connection polls', async () => {
  await env.start('a');
  await waitOwner(nodes.a, 'plc', ['a'], 15000, 'node a alone');
  await env.start('c');
  await waitValue(nodes.c, 'mb-0', 7, 10000, 'c mirrors a');
  const since = Date.now();
  await sleep(1000);
  const conns = new Set(requests.filter(([, t]) => t >= since).map(([id]) => id));
  assertEq(conns.size, 1, `connections polling in one second: ${[...conns]}`);
}, { timeout: 40000 });

await test('cluster modbus: the owner frozen past its lease: c polls; after SIGCONT a sends nothing more', async () => {
  const aConn = requests[requests.length - 1][0];
  process.kill(nodes.a.pid, 'SIGSTOP');
  let contAt;
  try {
    await waitOwner(nodes.c, 'plc', ['c'], LEASE_MS + 4000, 'while a is frozen');
    const t0 = Date.now();
    while (!requests.some(([id, t]) => id !== aConn && t >= t0 - 2000)) {
      if (Date.now() - t0 > 5000) throw new Error('c does not poll the device');
      await sleep(20);
    }
    await sleep(300);
  } finally {
    contAt = Date.now();
    process.kill(nodes.a.pid, 'SIGCONT');
  }
  await sleep(1500);
  const cFirst = requests.find(([id]) => id !== aConn)[1];
  const late = requests.filter(([id, t]) => id === aConn && t >= cFirst);
  diag(`requests on a's connection after c's first: ${late.length}; c's connection: ${requests.filter(([id]) => id !== aConn).length}`);
  assertEq(late.length, 0, `requests from a after c took over (a resumed at +${contAt - cFirst} ms): ${JSON.stringify(late)}`);
  assert(/unit plc: this node stops owning it/.test(nodes.a.log()), 'a did not give plc up');
}, { timeout: 30000 });

await test('cluster modbus: a move back to a while a write is made: no poll from c after a\'s first, the write made once', async () => {
  const cConn = requests[requests.length - 1][0];
  await sleep(1500); // a is heard again and settled
  const t0 = Date.now();
  const [w, m] = await Promise.all([
    http(nodes.c, 'PUT', '/api/v1/points/mb-0', { value: 9 }),
    http(nodes.c, 'POST', '/api/v1/cluster/units/plc/move', { node: 'a' })]);
  assertEq(m.status, 202, `move (${m.text})`);
  await waitOwner(nodes.c, 'plc', ['a'], 3000, 'after the move');
  const t1 = Date.now();
  while (!requests.some(([id, t]) => id !== cConn && t >= t0)) {
    if (Date.now() - t1 > 3000) throw new Error('a does not poll the device after the move');
    await sleep(20);
  }
  await sleep(500);
  const aFirst = requests.find(([id, t]) => id !== cConn && t >= t0)[1];
  const late = requests.filter(([id, t]) => id === cConn && t >= aFirst);
  assertEq(late.length, 0, `requests from c after a took over: ${JSON.stringify(late)}`);
  const writes = requests.filter(([, t, fc]) => t >= t0 && (fc === 6 || fc === 16));
  diag(`move: PUT answered ${w.status}; write requests at the device: ${writes.length}`);
  assert(writes.length <= 1, `the write reached the device ${writes.length} times`);
  if (w.status === 200) assertEq(writes.length, 1, 'an acknowledged write reached the device');
  await waitValue(nodes.c, 'mb-0', w.status === 200 ? 9 : 7, 5000, 'c after the move');
}, { timeout: 30000 });

proxy.close();
for (const s of sockets) s.destroy();
await srv.stop();
const san = work.sanitizerReport();
if (san) failTest('cluster modbus: no sanitizer report', san);
await finish();

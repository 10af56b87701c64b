// BACnet/IP driver: COV notifications a device gets wrong, and writes, against device
// simulators built on @bacnet-js/client (lib/bacnet_device.mjs). Notifications carrying
// property-array-index 4294967295 (what the library sends for "whole property") decode and
// are acknowledged; notifications that do not decode, and subscriptions that never deliver,
// put the objects back on polling (values still follow the device, the subscription is
// cancelled) instead of leaving their points good with a frozen value; WriteProperty with
// the point's priority, relinquish with {"value": null}, a device's refusal shown to the
// writer (502) and a viewer refused (403); subscriptions cancelled when opsd stops.
// docs/drivers.md "BACnet/IP".
import { test, finish, assert, assertEq, sleep, failTest } from './lib/harness.mjs';
import { workDir, startOpsd, http } from './lib/opsd.mjs';
import bacnet from '@bacnet-js/client';
import { startBacnetDevice, freeUdpPort } from './lib/bacnet_device.mjs';

const work = workDir('t_bacnet_cov_write');
let d, dev4, dev5, dev6, bindPort;
const OP = { Authorization: 'Bearer op-token' };
const VIEW = { Authorization: 'Bearer view-token' };
try {
  dev4 = await startBacnetDevice({ instance: 4004, objects: 4, avs: 3 });
  dev4.fault.covArrayAll = true;
  dev5 = await startBacnetDevice({ instance: 5005, objects: 4 });
  dev5.fault.covGarbage = true;
  dev6 = await startBacnetDevice({ instance: 6006, objects: 4 });
  dev6.fault.covNever = true;
  bindPort = await freeUdpPort();
  d = await startOpsd(work, {
    config: (port, dataDir) => `server:
  listen: 127.0.0.1:${port}
  data_dir: ${dataDir}
  auth:
    tokens:
      - {name: op, token: op-token, role: operator}
      - {name: view, token: view-token, role: viewer}
drivers:
  - type: bacnet
    name: bms
    bind: 127.0.0.1:${bindPort}
    broadcast: 127.0.0.1:9
    timeout: 200ms
    retries: 1
    poll: 400ms
    cov_lifetime: 60s
    device: {instance: 4194000, name: opsd-bms, vendor_id: 555}
    devices:
      - {instance: 4004, name: cov4, address: 127.0.0.1:${dev4.port}, cov: true, poll: 5s}
      - {instance: 5005, name: cov5, address: 127.0.0.1:${dev5.port}, cov: true}
      - {instance: 6006, name: cov6, address: 127.0.0.1:${dev6.port}, cov: true}
    points:
      - {name: "cov4-t{0..3}", device: 4004, object: "analog-input:{0..3}"}
      - {name: "sp4-a", device: 4004, object: "analog-value:0", writable: true, priority: 8}
      - {name: "sp4-b", device: 4004, object: "analog-value:1", writable: true}
      - {name: "ro4", device: 4004, object: "analog-input:3", property: present-value, writable: true, priority: 5}
      - {name: "cov5-t{0..3}", device: 5005, object: "analog-input:{0..3}"}
      - {name: "cov6-t{0..3}", device: 6006, object: "analog-input:{0..3}"}
`,
  });
} catch (e) {
  failTest('bacnet cov/write: devices and opsd start', e.stack || e.message);
  work.keep = true;
  await finish();
}

const point = async (name) => (await http(d, 'GET', `/api/v1/points/${name}`, undefined, OP)).json;
const health = async () => (await http(d, 'GET', '/api/v1/drivers/bms', undefined, OP)).json;
const names = (p, n) => Array.from({ length: n }, (_, i) => `${p}${i}`);

async function waitPoints(list, ok, ms, what) {
  const end = Date.now() + ms;
  let last = [];
  while (Date.now() < end) {
    last = await Promise.all(list.map(point));
    if (last.every((p) => p && ok(p))) return last;
    await sleep(50);
  }
  const bad = last.find((p) => !p || !ok(p));
  throw new Error(`${what}: not reached within ${ms} ms (e.g. ${JSON.stringify(bad)})`);
}

async function waitFor(cond, ms, what) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await cond()) return;
    await sleep(50);
  }
  throw new Error(`${what}: not reached within ${ms} ms`);
}

await test('COV with property-array-index 4294967295: decoded, acknowledged, changes arrive at once', async () => {
  await waitFor(() => dev4.subs.size === 4 && dev4.stats.covAcked >= 4, 5000, 'four subscriptions notified and acked');
  await waitPoints(names('cov4-t', 4), (p) => p.quality === 'good', 3000, 'cov4 values');
  const before = (await health()).malformed;
  const t0 = Date.now();
  dev4.set(2, 61.5); // polled only every 5 s: a change within a second came by COV
  await waitPoints(['cov4-t2'], (p) => p.value === 61.5 && p.quality === 'good', 1500, 'notified value');
  assert(Date.now() - t0 < 1500, 'arrived by notification');
  assertEq((await health()).malformed, before, 'nothing counted as malformed');
  assertEq(dev4.stats.covAcked, dev4.stats.covSent, 'every confirmed notification acknowledged');
});

await test('COV notifications that do not decode: the objects go back to polling, never frozen good', async () => {
  await waitFor(async () => (await health()).malformed >= 1, 5000, 'undecodable notifications counted');
  await waitFor(() => dev5.subs.size === 0 && dev5.stats.subscribe >= 8, 5000, 'subscriptions cancelled by opsd');
  dev5.values[1] = 555.25; // no notification can carry it: only polls see it
  dev5.values[3] = -8.5;
  await waitPoints(['cov5-t1', 'cov5-t3'], (p) => p.quality === 'good' && (p.value === 555.25 || p.value === -8.5),
    3000, 'values followed by polling');
  const dv = (await health()).devices.find((x) => x.name === 'cov5');
  assert(dv.errors >= 1 && /COV of analog-input:\d: a notification that does not decode: polled from now on/
    .test(dv.last_error), `device health: ${JSON.stringify(dv)}`);
  assert(/driver bms: malformed COV notification \(truncated\) from device cov5 at 127\.0\.0\.1:\d+/.test(d.log()),
    'the malformed line names the device');
  assert(/device cov5: COV of analog-input:/.test(d.log()), 'the fallback is logged with the device name');
});

await test('a subscription that never delivers: the object is polled again, not left with its last value', async () => {
  await waitFor(() => dev6.stats.subscribe >= 8 && dev6.subs.size === 0, 6000, 'subscribed, then cancelled');
  dev6.values[0] = 1234.5;
  await waitPoints(['cov6-t0'], (p) => p.quality === 'good' && p.value === 1234.5, 3000, 'polled value');
  const dv = (await health()).devices.find((x) => x.name === 'cov6');
  assert(/no notification after the subscription was acknowledged/.test(dv.last_error), dv.last_error);
});

await test('WriteProperty at the point\'s priority, read back', async () => {
  let r = await http(d, 'PUT', '/api/v1/points/sp4-a', { value: 42.5 }, OP);
  assertEq(r.status, 200, `PUT sp4-a: ${r.text}`);
  assertEq(r.json.written, true, 'written');
  let w = dev4.writes.at(-1);
  assertEq([w.instance, w.priority, w.tag, w.value], [0, 8, 4, 42.5], 'REAL at priority 8');
  r = await http(d, 'PUT', '/api/v1/points/sp4-b', { value: 7 }, OP);
  assertEq(r.status, 200, `PUT sp4-b: ${r.text}`);
  w = dev4.writes.at(-1);
  assertEq([w.instance, w.priority, w.value], [1, 16, 7], 'default priority 16');
  await waitPoints(['sp4-a'], (p) => p.value === 42.5 && p.quality === 'good', 6000, 'sp4-a read back');
  await waitPoints(['sp4-b'], (p) => p.value === 7, 6000, 'sp4-b read back');
});

await test('relinquish: {"value": null} writes NULL at the priority; the relinquish default takes over', async () => {
  dev4.av[0].pa[15] = 3.25; // something at a lower priority underneath
  const r = await http(d, 'PUT', '/api/v1/points/sp4-a', { value: null }, OP);
  assertEq(r.status, 200, `PUT null: ${r.text}`);
  const w = dev4.writes.at(-1);
  assertEq([w.instance, w.priority, w.tag], [0, 8, 0], 'NULL at priority 8');
  assertEq(dev4.av[0].pa[7], null, 'slot 8 released');
  await waitPoints(['sp4-a'], (p) => p.value === 3.25, 6000, 'the lower priority shows');
  const bad = await http(d, 'PUT', '/api/v1/points/cov4-t0', { value: null }, OP);
  assertEq(bad.status, 409, `not writable: ${bad.text}`);
});

await test('a write the device refuses: 502 with BACnet\'s error; a viewer is refused', async () => {
  const r = await http(d, 'PUT', '/api/v1/points/ro4', { value: 1 }, OP);
  assertEq(r.status, 502, r.text);
  assert(/write-access-denied/.test(r.text), r.text);
  assertEq(dev4.writes.at(-1).priority, 5, 'sent at priority 5');
  const n = dev4.writes.length;
  const v = await http(d, 'PUT', '/api/v1/points/sp4-b', { value: 9 }, VIEW);
  assertEq(v.status, 403, v.text);
  assertEq(dev4.writes.length, n, 'nothing sent for the viewer');
  const nn = await http(d, 'PUT', '/api/v1/points/sp4-b', { value: 'x' }, OP);
  assertEq(nn.status, 400, nn.text);
});

await test('opsd\'s own device object: I-Am to Who-Is, ReadProperty of its properties', async () => {
  const port = await freeUdpPort();
  const c = new bacnet.default({ port, interface: '127.0.0.1', broadcastAddress: '127.0.0.1', apduTimeout: 1000 });
  try {
    const to = { address: `127.0.0.1:${bindPort}` };
    const iams = [];
    c.on('iAm', (m) => iams.push(m.payload));
    c.whoIs(to, { lowLimit: 4194000, highLimit: 4194000 });
    c.whoIs(to, { lowLimit: 1, highLimit: 2 }); // not in range: no answer
    await waitFor(() => iams.length >= 1, 2000, 'I-Am');
    await sleep(200);
    assertEq(iams.length, 1, 'one I-Am (the range that excludes it is not answered)');
    assertEq([iams[0].deviceId, iams[0].vendorId], [4194000, 555], 'instance and vendor');
    const dev = { type: 8, instance: 4194000 };
    const name = await c.readProperty(to, dev, 77);
    assertEq(name.values[0].value, 'opsd-bms', 'object-name');
    const ol = await c.readProperty(to, dev, 76);
    assertEq(ol.values[0].value.instance, 4194000, 'object-list');
    let err = null;
    try { await c.readProperty(to, dev, 4242); } catch (e) { err = e; }
    assert(err && /UNKNOWN_PROPERTY|32/i.test(String(err.message)), `unknown property: ${err && err.message}`);
  } finally {
    c.close();
  }
});

await test('stop: subscriptions cancelled at the device', async () => {
  assert(dev4.subs.size === 4, `subscribed before: ${dev4.subs.size}`);
  await d.stop('SIGTERM', 5000);
  await waitFor(() => dev4.subs.size === 0, 2000, 'cancelled');
});

dev4?.close();
dev5?.close();
dev6?.close();
await finish();

// BACnet/IP driver against device simulators built on the npm library @bacnet-js/client
// (lib/bacnet_device.mjs), each on loopback at its own UDP port: values read with
// ReadPropertyMultiple appear through REST; status flags become quality; COV subscriptions up
// to the device's limit, notifications acknowledged, the rest polled; faults: silence turns
// points bad with a reason and they recover, Reject and Abort shrink the batches, a device
// without RPM is read with ReadProperty (found by Who-Is), answers out of order, malformed
// datagrams counted. docs/drivers.md "BACnet/IP".
import dgram from 'node:dgram';
import { readFileSync, writeFileSync } from 'node:fs';
import { test, finish, assert, assertEq, sleep, failTest, diag } from './lib/harness.mjs';
import { workDir, startOpsd, http } from './lib/opsd.mjs';
import { startBacnetDevice, freeUdpPort, StatusFlags } from './lib/bacnet_device.mjs';

const work = workDir('t_bacnet');
let d, dev1, dev2, dev3, bindPort;
try {
  dev1 = await startBacnetDevice({ instance: 1001, objects: 20 });
  dev2 = await startBacnetDevice({ instance: 2002, objects: 8, covLimit: 5 });
  dev3 = await startBacnetDevice({ instance: 3003, objects: 4 });
  dev3.fault.noRpm = true;
  bindPort = await freeUdpPort();
  d = await startOpsd(work, {
    config: (port, dataDir) => `server:
  listen: 127.0.0.1:${port}
  data_dir: ${dataDir}
drivers:
  - type: bacnet
    name: bms
    bind: 127.0.0.1:${bindPort}
    broadcast: 127.0.0.1:${dev3.port}
    timeout: 150ms
    retries: 1
    poll: 300ms
    discover: 500ms
    cov_lifetime: 4s
    devices:
      - {instance: 1001, name: ahu1, address: 127.0.0.1:${dev1.port}, max_in_flight: 4}
      - {instance: 2002, name: ahu2, address: 127.0.0.1:${dev2.port}, cov: true, poll: 1s}
    points:
      - {name: "ahu1-t{00..19}", device: 1001, object: "analog-input:{0..19}", unit: degC}
      - {name: "ahu1-missing", device: 1001, object: "analog-input:50"}
      - {name: "ahu2-t{0..7}", device: 2002, object: "analog-input:{0..7}"}
      - {name: "vav3-t{0..3}", device: 3003, object: "analog-input:{0..3}", property: present-value}
`,
  });
} catch (e) {
  failTest('bacnet: devices and opsd start', e.stack || e.message);
  work.keep = true;
  await finish();
}

const point = async (name) => (await http(d, 'GET', `/api/v1/points/${name}`)).json;
const pad = (i) => String(i).padStart(2, '0');

// Waits until every named point satisfies ok(p); returns the points, or throws with the last.
async function waitPoints(names, ok, ms, what) {
  const end = Date.now() + ms;
  let last = [];
  while (Date.now() < end) {
    last = await Promise.all(names.map(point));
    if (last.every((p) => p && ok(p))) return last;
    await sleep(50);
  }
  const bad = last.find((p) => !p || !ok(p));
  throw new Error(`${what}: not reached within ${ms} ms (e.g. ${JSON.stringify(bad)})`);
}

const ahu1 = Array.from({ length: 20 }, (_, i) => `ahu1-t${pad(i)}`);
const ahu2 = Array.from({ length: 8 }, (_, i) => `ahu2-t${i}`);
const vav3 = Array.from({ length: 4 }, (_, i) => `vav3-t${i}`);

await test('RPM poll: 20 analog inputs appear through REST with their values, good', async () => {
  const pts = await waitPoints(ahu1, (p) => p.quality === 'good', 5000, 'ahu1 values');
  pts.forEach((p, i) => assertEq(p.value, 20 + i + 0.25, `${p.name} value`));
  assertEq(pts[0].unit, 'degC', 'unit');
  assert(dev1.stats.rpm > 0, 'the device saw ReadPropertyMultiple');
  assertEq(dev1.stats.rp, 0, 'ReadProperty requests for points of an RPM device');
  assert(dev1.stats.rpDevice >= 1 && /device ahu1 takes APDUs of 1476 octets/.test(d.log()),
    'its max APDU read from the device object');
  const miss = await point('ahu1-missing');
  assertEq([miss.quality, miss.reason], ['bad', 'unknown-object'], 'a point on an object the device lacks');
});

await test('value changes on the device arrive at the next poll', async () => {
  dev1.set(7, 55.5);
  dev1.set(19, -3.75);
  await waitPoints(['ahu1-t07'], (p) => p.value === 55.5, 2000, 'ahu1-t07 = 55.5');
  await waitPoints(['ahu1-t19'], (p) => p.value === -3.75, 2000, 'ahu1-t19 = -3.75');
});

await test('status flags: fault -> bad, out-of-service -> uncertain, cleared -> good', async () => {
  dev1.setFlags(3, [StatusFlags.FAULT]);
  dev1.setFlags(4, [StatusFlags.OUT_OF_SERVICE]);
  await waitPoints(['ahu1-t03'], (p) => p.quality === 'bad' && p.reason === 'fault', 2000, 'ahu1-t03 bad (fault)');
  await waitPoints(['ahu1-t04'], (p) => p.quality === 'uncertain' && p.reason === 'out-of-service', 2000,
    'ahu1-t04 uncertain');
  dev1.setFlags(3, []);
  dev1.setFlags(4, []);
  await waitPoints(['ahu1-t03', 'ahu1-t04'], (p) => p.quality === 'good', 2000, 'flags cleared');
});

await test('COV: 5 of 8 objects subscribed (the device limit), confirmed notifications acknowledged', async () => {
  const end = Date.now() + 5000;
  while (Date.now() < end && !(dev2.subs.size === 5 && dev2.stats.covAcked >= 5)) await sleep(50);
  assertEq(dev2.subs.size, 5, 'objects subscribed at the device');
  assert(dev2.stats.refused >= 1, 'the device refused a subscription past its limit');
  assert(dev2.stats.covAcked >= 5, `notifications acknowledged: ${dev2.stats.covAcked} of ${dev2.stats.covSent}`);
  for (const [, s] of dev2.subs) {
    assert(s.confirmed, 'confirmed notifications asked for');
    assert(s.expires - Date.now() <= 4000 && s.expires - Date.now() > 0, 'a finite lifetime (4 s)');
  }
  await waitPoints(ahu2, (p) => p.quality === 'good', 3000, 'ahu2 values');
});

await test('COV: a change notified by the device arrives at once; objects past the limit are polled', async () => {
  const subscribed = [...dev2.subs.keys()];
  const polled = [...Array(8).keys()].filter((i) => !dev2.subs.has(i));
  assertEq(polled.length, 3, 'objects left to polling');
  const t0 = Date.now();
  dev2.set(subscribed[0], 123.5);
  await waitPoints([`ahu2-t${subscribed[0]}`], (p) => p.value === 123.5, 800, 'notified value');
  diag(`COV change visible after ${Date.now() - t0} ms`);
  dev2.values[polled[0]] = 77.5; // no subscriber: only a poll (1 s) can see it
  await waitPoints([`ahu2-t${polled[0]}`], (p) => p.value === 77.5, 3000, 'polled value past the limit');
});

await test('COV: subscriptions renewed at half their lifetime', async () => {
  const before = dev2.stats.subscribe;
  await sleep(2600);
  assert(dev2.stats.subscribe >= before + 5, `renewals: ${dev2.stats.subscribe - before} SubscribeCOV in 2.6 s`);
  for (const [, s] of dev2.subs) assert(s.expires > Date.now(), 'no subscription lapsed');
});

await test('no RPM: the device found by Who-Is is read with ReadProperty', async () => {
  const pts = await waitPoints(vav3, (p) => p.quality === 'good', 5000, 'vav3 values');
  pts.forEach((p, i) => assertEq(p.value, 20 + i + 0.25, `${p.name} value`));
  assert(dev3.stats.whoIs >= 1, 'Who-Is seen');
  assert(dev3.stats.rp >= 4, `ReadProperty requests: ${dev3.stats.rp}`);
  assertEq(dev3.stats.rpm, 1, 'RPM tried once');
});

await test('Reject: batches shrink until the device takes them', async () => {
  dev1.fault.maxRefs = 9;
  for (let i = 0; i < 20; i++) dev1.values[i] = 100 + i;
  const pts = await waitPoints(ahu1, (p) => p.quality === 'good' && p.value >= 100, 5000, 'values after Reject');
  pts.forEach((p, i) => assertEq(p.value, 100 + i, `${p.name} value`));
  assert(dev1.stats.rejected >= 1, 'the device rejected large RPMs');
  assert(/Reject, batches of \d+ points/.test(d.log()), 'the shrink is logged');
});

await test('Abort: batches shrink further', async () => {
  dev1.fault.maxRefs = 3; // below what the Reject step left (2 to 4 points, 2 properties each)
  dev1.fault.mode = 'abort';
  for (let i = 0; i < 20; i++) dev1.values[i] = 200 + i;
  const pts = await waitPoints(ahu1, (p) => p.quality === 'good' && p.value >= 200, 5000, 'values after Abort');
  pts.forEach((p, i) => assertEq(p.value, 200 + i, `${p.name} value`));
  assert(dev1.stats.aborted >= 1, 'the device aborted large RPMs');
  const rejected = dev1.stats.rejected, aborted = dev1.stats.aborted;
  await sleep(1000);
  assertEq([dev1.stats.rejected, dev1.stats.aborted], [rejected, aborted], 'no refusals once small enough');
  dev1.fault.maxRefs = 0;
});

await test('answers out of order still land on their own points', async () => {
  dev1.fault.reorder = true;
  for (let i = 0; i < 20; i++) dev1.values[i] = 300 + i * 2;
  const pts = await waitPoints(ahu1, (p) => p.value >= 300, 5000, 'values with reordered answers');
  pts.forEach((p, i) => assertEq(p.value, 300 + i * 2, `${p.name} value`));
  dev1.fault.reorder = false;
});

await test('silence: points turn bad with a reason, the device shows disconnected; back when it answers', async () => {
  dev1.fault.silent = true;
  const pts = await waitPoints(ahu1, (p) => p.quality === 'bad', 3000, 'ahu1 bad');
  assert(/^ahu1: no answer to ReadPropertyMultiple after 2 tries/.test(pts[0].reason), `reason: ${pts[0].reason}`);
  assertEq(pts[5].value, 310, 'the last value is kept');
  const r = await http(d, 'GET', '/api/v1/drivers/bms');
  assertEq(r.status, 200, 'GET /api/v1/drivers/bms');
  const a = r.json.devices.find((x) => x.name === 'ahu1');
  assert(a && a.connected === false && a.errors >= 1 && /no answer/.test(a.last_error), `device health ${JSON.stringify(a)}`);
  const ok2 = (await point('ahu2-t0')).quality;
  assertEq(ok2, 'good', 'another device is unaffected');
  dev1.fault.silent = false;
  await waitPoints(ahu1, (p) => p.quality === 'good', 3000, 'ahu1 good again');
  const r2 = await http(d, 'GET', '/api/v1/drivers/bms');
  assert(r2.json.devices.find((x) => x.name === 'ahu1').connected, 'connected again');
});

await test('malformed datagrams are counted and change nothing', async () => {
  const before = (await http(d, 'GET', '/api/v1/drivers/bms')).json.malformed;
  const s = dgram.createSocket('udp4');
  const junk = [
    Buffer.from([0x81, 0x0a, 0x00, 0x40, 0x01]),
    Buffer.from([0x81, 0x0a, 0x00, 0x07, 0x02, 0x00, 0x10]),
    Buffer.from([0x81, 0x0b, 0x00, 0x0a, 0x01, 0x00, 0x10, 0x00, 0xc4, 0x02]),
    Buffer.from([0x81, 0x0a, 0x00, 0x0d, 0x01, 0x00, 0x30, 0x01, 0x0e, 0x0c, 0x00, 0x00, 0x4e]),
  ];
  for (const b of junk) await new Promise((r) => s.send(b, bindPort, '127.0.0.1', r));
  s.close();
  const end = Date.now() + 2000;
  let now = before;
  while (Date.now() < end && now < before + 3) {
    await sleep(50);
    now = (await http(d, 'GET', '/api/v1/drivers/bms')).json.malformed;
  }
  assert(now >= before + 3, `malformed count ${before} -> ${now}`);
  dev1.set(0, 999.5);
  await waitPoints(['ahu1-t00'], (p) => p.value === 999.5 && p.quality === 'good', 2000, 'still polling');
});

await test('reload: the driver restarts on the same UDP port, a new point is read, old ones go on', async () => {
  const cfg = readFileSync(d.configPath, 'utf8');
  writeFileSync(d.configPath, cfg.replace('      - {name: "ahu1-missing"',
    '      - {name: "ahu1-extra", device: 1001, object: "analog-input:19"}\n      - {name: "ahu1-missing"'));
  dev1.set(19, 4242.5);
  await waitPoints(['ahu1-extra'], (p) => p.quality === 'good' && p.value === 4242.5, 5000, 'the new point');
  dev1.set(1, 1.5);
  await waitPoints(['ahu1-t01'], (p) => p.quality === 'good' && p.value === 1.5, 3000, 'an old point after reload');
  assert(!/cannot use UDP/.test(d.log()), 'the UDP port was taken again');
});

dev1?.close();
dev2?.close();
dev3?.close();
await finish();

// MQTT driver, plain topics: Debian's mosquitto broker started by the test on its own port,
// and the npm package `mqtt` publishing. Covers numeric and text payloads, JSON paths for
// the value and the time, topics in step with brace names, + wildcards mapped to points with
// a template, malformed payloads (counted, the point bad with the reason, the driver going
// on), health in GET /api/v1/drivers and /metrics, and a broker outage: every point bad with
// the reason, then reconnect, subscriptions again, values good. docs/drivers.md "MQTT".
import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import mqtt from 'mqtt';
import { test, finish, assert, assertEq, sleep, failTest, onCleanup } from './lib/harness.mjs';
import { workDir, startOpsd, http, metrics, freePort } from './lib/opsd.mjs';
import { MosquittoBroker } from './lib/mqtt_broker.mjs';

const work = workDir('t_mqtt');
const bport = await freePort();
const broker = new MosquittoBroker({ port: bport, dir: work.dir });
try {
  await broker.start();
} catch (e) {
  failTest('mqtt: mosquitto starts', e.message);
  await finish();
}

const config = (port, dataDir) => `server:
  listen: 127.0.0.1:${port}
  data_dir: ${dataDir}
drivers:
  - type: mqtt
    name: site
    host: 127.0.0.1
    port: ${bport}
    keepalive: 5s
    backoff_max: 1s
    points:
      - {name: "mq-num", type: double, unit: bar, topic: "plant/num"}
      - {name: "mq-room-{1..3}-temp", type: double, topic: "plant/room{1..3}/env", value: "$.temp", time: "$.ts"}
      - {name: "mq-room-{1..3}-hum", type: int, topic: "plant/room{1..3}/env", value: "hum"}
      - {name: "mq-tank-{a,b}-level", type: double, topic: "tanks/+/level", point: "mq-tank-$1-level", value: "$.v[1]"}
      - {name: "mq-state", type: string, topic: "plant/state"}
      - {name: "mq-on", type: bool, topic: "plant/on"}
      - {name: "mq-deep", type: double, topic: "deep/#", value: '$["a b"].c'}
      - {name: "mq-hb", type: double, topic: "plant/hb", stale: 1s}
`;

let d;
try {
  d = await startOpsd(work, { config });
} catch (e) {
  failTest('mqtt: opsd starts', e.message);
  work.keep = true;
  await finish();
}

const pub = mqtt.connect(`mqtt://127.0.0.1:${bport}`, { reconnectPeriod: 300 });
onCleanup(() => pub.end(true));
await new Promise((resolve, reject) => {
  pub.once('connect', resolve);
  pub.once('error', reject);
});
const publish = (topic, payload) => new Promise((resolve, reject) =>
  pub.publish(topic, payload, { qos: 1 }, (e) => (e ? reject(e) : resolve())));

const point = async (name) => (await http(d, 'GET', `/api/v1/points/${name}`)).json;
const health = async () => (await http(d, 'GET', '/api/v1/drivers/site')).json;
// Publishes until the point shows it: right after CONNACK opsd's SUBSCRIBE may still be on
// its way, and a message published before it is processed is not delivered.
async function publishUntil(topic, payload, name, pred, ms = 5000) {
  const end = Date.now() + ms;
  for (;;) {
    await publish(topic, payload);
    const p = await point(name);
    if (p && pred(p)) return p;
    if (Date.now() > end) throw new Error(`point ${name}: not within ${ms} ms (last: ${JSON.stringify(p)})`);
    await sleep(200);
  }
}

async function waitPoint(name, pred, ms = 5000) {
  const end = Date.now() + ms;
  let p;
  for (;;) {
    p = await point(name);
    if (p && pred(p)) return p;
    if (Date.now() > end) throw new Error(`point ${name}: not within ${ms} ms (last: ${JSON.stringify(p)})`);
    await sleep(50);
  }
}

await test('mqtt: connected and subscribed', async () => {
  const end = Date.now() + 5000;
  while (!(await health()).connected) {
    if (Date.now() > end) throw new Error(`not connected: ${JSON.stringify(await health())}`);
    await sleep(50);
  }
  const p = await point('mq-num');
  assertEq(p.quality, 'bad', 'a point without a message yet');
});

await test('mqtt: a numeric payload', async () => {
  const p = await publishUntil('plant/num', '12.5', 'mq-num', (x) => x.quality === 'good');
  assertEq(p.value, 12.5, 'value');
  assertEq(p.unit, 'bar', 'unit');
  assert(Math.abs(p.ts - Date.now()) < 5000, `ts is the arrival time: ${p.ts}`);
});

await test('mqtt: JSON paths for value and time, topics in step with the names', async () => {
  await publish('plant/room2/env', JSON.stringify({ temp: 21.5, hum: 40, ts: 1764460800000 }));
  const t = await waitPoint('mq-room-2-temp', (x) => x.quality === 'good');
  assertEq(t.value, 21.5, 'temp');
  assertEq(t.ts, 1764460800000, 'source time from $.ts');
  const h = await waitPoint('mq-room-2-hum', (x) => x.quality === 'good');
  assertEq(h.value, 40, 'hum from the same message');
  await publish('plant/room3/env', JSON.stringify({ temp: '19.25', hum: 41.0, ts: '2025-12-01T00:00:00Z' }));
  const t3 = await waitPoint('mq-room-3-temp', (x) => x.quality === 'good');
  assertEq(t3.value, 19.25, 'a number as text');
  assertEq(t3.ts, Date.parse('2025-12-01T00:00:00Z'), 'RFC 3339 time');
  assertEq((await point('mq-room-1-temp')).quality, 'bad', 'room 1 has no message');
});

await test('mqtt: + wildcard mapped to points by a template', async () => {
  await publish('tanks/b/level', JSON.stringify({ v: [0, 3.5] }));
  const p = await waitPoint('mq-tank-b-level', (x) => x.quality === 'good');
  assertEq(p.value, 3.5, 'value at $.v[1]');
  await publish('tanks/zzz/level', JSON.stringify({ v: [0, 1] })); // no such point: ignored
  await publish('deep/x/y/z', JSON.stringify({ 'a b': { c: 7 } }));
  const dp = await waitPoint('mq-deep', (x) => x.quality === 'good');
  assertEq(dp.value, 7, '# filter, quoted key');
  assertEq((await point('mq-tank-a-level')).quality, 'bad', 'the other tank untouched');
});

await test('mqtt: text and bool payloads', async () => {
  await publish('plant/state', 'running fine');
  await publish('plant/on', 'on');
  assertEq((await waitPoint('mq-state', (x) => x.quality === 'good')).value, 'running fine', 'string');
  assertEq((await waitPoint('mq-on', (x) => x.quality === 'good')).value, true, 'bool from "on"');
  await publish('plant/on', 'false');
  await waitPoint('mq-on', (x) => x.value === false);
});

await test('mqtt: malformed payloads are counted, the point turns bad with the reason, the driver goes on', async () => {
  const m0 = (await metrics(d)).get('opsd_driver_malformed_total{driver="site"}');
  await publish('plant/num', 'twelve');
  let p = await waitPoint('mq-num', (x) => x.quality === 'bad');
  assert(/not .*value|neither JSON/.test(p.reason), `reason: ${p.reason}`);
  await publish('plant/room1/env', '{"temp": ');
  await publish('plant/room1/env', JSON.stringify({ hum: 3 })); // temp path missing
  p = await waitPoint('mq-room-1-temp', (x) => x.quality === 'bad' && /path/.test(x.reason || ''));
  await publish('plant/room1/env', JSON.stringify({ temp: 1, hum: 2, ts: 'yesterday' }));
  await waitPoint('mq-room-1-temp', (x) => x.quality === 'bad' && /time/.test(x.reason || ''));
  await publish('plant/num', Buffer.alloc(2 * 1024 * 1024, 0x31)); // 2 MiB of digits
  await publish('plant/num', '13');
  await waitPoint('mq-num', (x) => x.quality === 'good' && x.value === 13);
  const m1 = (await metrics(d)).get('opsd_driver_malformed_total{driver="site"}');
  assert(m1 - m0 >= 5, `malformed counted: ${m0} -> ${m1}`);
  assert(/malformed message/.test(d.log()), 'logged');
});

await test('mqtt: a point with stale: turns bad when its messages stop, good with the next', async () => {
  await publish('plant/hb', '1');
  await waitPoint('mq-hb', (x) => x.quality === 'good');
  const p = await waitPoint('mq-hb', (x) => x.quality === 'bad', 3000);
  assertEq(p.reason, 'no message within 1s', 'reason');
  assertEq(p.value, 1, 'the last value is kept');
  await publish('plant/hb', '2');
  await waitPoint('mq-hb', (x) => x.quality === 'good' && x.value === 2);
});

await test('mqtt: health in GET /api/v1/drivers and /metrics', async () => {
  const h = await health();
  assertEq(h.type, 'mqtt', 'type');
  assertEq(h.devices.length, 1, 'one device: the broker');
  const dev = h.devices[0];
  assertEq(dev.name, `127.0.0.1:${bport}`, 'device name');
  assertEq(dev.connected, true, 'connected');
  assert(dev.requests > 0 && Math.abs(dev.last_success - Date.now()) < 10000, JSON.stringify(dev));
  assertEq(dev.points, 13, 'points');
  const m = await metrics(d);
  assertEq(m.get(`opsd_driver_device_connected{driver="site",device="127.0.0.1:${bport}"}`), 1, 'metric');
});

await test('mqtt: broker down -> every point bad with the reason; back -> resubscribed, good again', async () => {
  await broker.stop();
  const p = await waitPoint('mq-room-2-temp', (x) => x.quality === 'bad', 5000);
  assert(p.reason.includes(`127.0.0.1:${bport}`) && /lost/.test(p.reason), `reason: ${p.reason}`);
  assertEq((await point('mq-state')).quality, 'bad', 'mq-state');
  assertEq((await health()).connected, false, 'health');
  await sleep(1500);
  await broker.start();
  const end = Date.now() + 8000;
  while (!(await health()).connected) {
    if (Date.now() > end) throw new Error('opsd did not reconnect within 8 s');
    await sleep(100);
  }
  if (!pub.connected) await new Promise((r) => pub.once('connect', r));
  await publishUntil('plant/room2/env', JSON.stringify({ temp: 22, hum: 44 }), 'mq-room-2-temp',
    (x) => x.quality === 'good' && x.value === 22);
  await publish('tanks/a/level', JSON.stringify({ v: [9, 8] }));
  await waitPoint('mq-tank-a-level', (x) => x.quality === 'good' && x.value === 8, 5000);
});

await test('mqtt: a broker that is not up when opsd starts is connected to once it is', async () => {
  const p2 = await freePort();
  const dir2 = join(work.dir, 'broker2');
  mkdirSync(dir2);
  const b2 = new MosquittoBroker({ port: p2, dir: dir2 });
  const d2 = await startOpsd(work, { config: (port, dataDir) => `server:
  listen: 127.0.0.1:${port}
  data_dir: ${dataDir}
drivers:
  - {type: mqtt, name: late, host: 127.0.0.1, port: ${p2}, backoff_max: 1s,
     points: [{name: "late-x", type: double, topic: "late/x"}]}
` });
  await sleep(1500);
  let h = (await http(d2, 'GET', '/api/v1/drivers/late')).json;
  assertEq(h.connected, false, 'not connected while the broker is down');
  assert(/refused/.test(h.devices[0].last_error), `last_error: ${h.devices[0].last_error}`);
  await b2.start();
  const end = Date.now() + 5000;
  while (!(h = (await http(d2, 'GET', '/api/v1/drivers/late')).json).connected) {
    if (Date.now() > end) throw new Error(`not connected within 5 s: ${JSON.stringify(h)}`);
    await sleep(100);
  }
  const e = await d2.stop('SIGTERM', 5000);
  assertEq(e.killed, false, 'stopped within 5 s');
  await b2.stop();
});

await test('mqtt: invalid driver entries are refused with FILE:LINE and reason', async () => {
  const bad = `drivers:
  - type: mqtt
    name: m
    host: 127.0.0.1
    qos: 3
    points:
      - {name: "a{1..3}", type: double, topic: "x/+/y"}
      - {name: "b{1..3}", type: double, topic: "x/b{1..2}"}
      - {name: "c", type: double, topic: "x/c#"}
      - {name: "d", type: double, topic: "x/d", value: "$.a[x]"}
      - {name: "e", type: double, metric: "m", node: "n"}
      - {name: "f", type: double, topic: "x/f", writable: true}
      - {name: "g{1..2}", type: double, topic: "x/+", point: "g$2"}
      - {name: "h", type: double, topic: "x/h", stale: 10ms}
`;
  const f = join(work.dir, 'bad.yaml');
  writeFileSync(f, bad);
  const r = spawnSync(process.env.OPSD, ['--check-config', f], { encoding: 'utf8' });
  assertEq(r.status, 1, 'exit status');
  for (const re of [/:5: .*qos/, /:7: .*needs 'point'/, /:8: .*expands to 2 names but 'name' to 3/, /:9: .*whole level/,
    /:10: .*index/, /:11: .*sparkplug/, /:12: .*needs 'command_topic'/, /:13: .*\$N beyond/, /:14: .*'stale' must be/]) {
    assert(re.test(r.stderr), `${re} in: ${r.stderr}`);
  }
});

await test('mqtt: etc/examples/mqtt.yaml is a valid configuration', async () => {
  const f = new URL('../../etc/examples/mqtt.yaml', import.meta.url).pathname;
  const r = spawnSync(process.env.OPSD, ['--check-config', f], { encoding: 'utf8' });
  assertEq(r.status, 0, `--check-config: ${r.stderr}`);
});

await test('mqtt: SIGTERM stops the driver cleanly', async () => {
  const e = await d.stop('SIGTERM', 5000);
  assertEq(e.killed, false, 'stopped within 5 s');
  assertEq(e.code, 0, 'exit status');
  const rep = work.sanitizerReport();
  assert(!rep, `sanitizer: ${rep}`);
});

await finish();

// MQTT driver, Sparkplug B: mosquitto started by the test, edge nodes played by the npm
// packages `mqtt` and `sparkplug-payload` (the Eclipse Tahu JavaScript encoder). Covers
// NBIRTH/DBIRTH alias maps, NDATA/DDATA by alias, signed Int32, DDEATH and NDEATH (bad with
// the reason, a stale bdSeq ignored), sequence gaps, unknown aliases and data before birth
// (rebirth requested with an NCMD Node Control/Rebirth), rebirth requests on connect, a
// malformed payload, per-node health. docs/drivers.md "Sparkplug B".
import mqtt from 'mqtt';
import sparkplug from 'sparkplug-payload';
import { test, finish, assert, assertEq, sleep, failTest, onCleanup } from './lib/harness.mjs';
import { workDir, startOpsd, http, metrics, freePort } from './lib/opsd.mjs';
import { MosquittoBroker } from './lib/mqtt_broker.mjs';

const sp = sparkplug.get('spBv1.0');
const work = workDir('t_mqtt_sparkplug');
const bport = await freePort();
const broker = new MosquittoBroker({ port: bport, dir: work.dir });
try {
  await broker.start();
} catch (e) {
  failTest('sparkplug: mosquitto starts', e.message);
  await finish();
}

// The edge side: one client that publishes for both nodes and records every NCMD.
const edge = mqtt.connect(`mqtt://127.0.0.1:${bport}`, { reconnectPeriod: 300 });
onCleanup(() => edge.end(true));
await new Promise((resolve, reject) => {
  edge.once('connect', resolve);
  edge.once('error', reject);
});
const ncmds = []; // [node, metric names, time]
edge.on('message', (topic, payload) => {
  const m = topic.match(/^spBv1\.0\/G1\/NCMD\/([^/]+)$/);
  if (!m) return;
  const p = sp.decodePayload(payload);
  ncmds.push({ node: m[1], metrics: p.metrics.map((x) => `${x.name}=${x.value}`), at: Date.now() });
});
await new Promise((resolve, reject) => edge.subscribe('spBv1.0/G1/NCMD/+', { qos: 1 }, (e) => (e ? reject(e) : resolve())));

const send = (type, node, device, payload) => new Promise((resolve, reject) => {
  const topic = `spBv1.0/G1/${type}/${node}${device ? `/${device}` : ''}`;
  const buf = Buffer.isBuffer(payload) ? payload : sp.encodePayload({ timestamp: Date.now(), ...payload });
  edge.publish(topic, buf, { qos: 1 }, (e) => (e ? reject(e) : resolve()));
});

const config = (port, dataDir) => `server:
  listen: 127.0.0.1:${port}
  data_dir: ${dataDir}
drivers:
  - type: mqtt
    name: spb
    host: 127.0.0.1
    port: ${bport}
    keepalive: 5s
    backoff_max: 1s
    sparkplug: {group: G1}
    points:
      - {name: "sp-e1-temp", type: double, node: E1, metric: "Process/Temp"}
      - {name: "sp-e1-temp2", type: int, node: E1, metric: "Process/Temp"}
      - {name: "sp-e1-odd", type: double, node: E1, metric: "Odd"}
      - {name: "sp-e1-count", type: int, node: E1, metric: "Count"}
      - {name: "sp-d1-level-{1..2}", type: double, node: E1, device: D1, metric: "Level{1..2}"}
      - {name: "sp-d1-run", type: bool, node: E1, device: D1, metric: "Running"}
      - {name: "sp-e2-flag", type: bool, node: E2, metric: "Flag"}
`;

let d;
try {
  d = await startOpsd(work, { config });
} catch (e) {
  failTest('sparkplug: opsd starts', e.message);
  work.keep = true;
  await finish();
}

const point = async (name) => (await http(d, 'GET', `/api/v1/points/${name}`)).json;
const health = async () => (await http(d, 'GET', '/api/v1/drivers/spb')).json;
const node = async (name) => (await health()).devices.find((x) => x.name === name);
async function waitFor(what, fn, ms = 5000) {
  const end = Date.now() + ms;
  let last;
  for (;;) {
    last = await fn();
    if (last) return last;
    if (Date.now() > end) throw new Error(`${what}: not within ${ms} ms`);
    await sleep(50);
  }
}
async function waitPoint(name, pred, ms = 5000) {
  let p;
  try {
    return await waitFor(`point ${name}`, async () => {
      p = await point(name);
      return p && pred(p) ? p : null;
    }, ms);
  } catch (e) {
    throw new Error(`${e.message} (last: ${JSON.stringify(p)})`);
  }
}
const rebirthFor = (n, since) => waitFor(`NCMD Rebirth for ${n}`, async () =>
  ncmds.find((c) => c.node === n && c.at >= since && c.metrics.includes('Node Control/Rebirth=true')), 5000);

let seq = 0;
const nextSeq = () => { const s = seq; seq = (seq + 1) % 256; return s; };

await test('sparkplug: on connect the host asks every configured node to rebirth', async () => {
  await rebirthFor('E1', 0);
  await rebirthFor('E2', 0);
});

await test('sparkplug: NBIRTH and DBIRTH values, then NDATA and DDATA by alias', async () => {
  seq = 0;
  await send('NBIRTH', 'E1', null, { seq: nextSeq(), metrics: [
    { name: 'bdSeq', type: 'UInt64', value: 3 },
    { name: 'Process/Temp', alias: 1, type: 'Double', value: 20.5 },
    { name: 'Count', alias: 2, type: 'Int32', value: -5 },
    { name: 'Unmapped', alias: 3, type: 'Float', value: 1 },
  ] });
  await send('DBIRTH', 'E1', 'D1', { seq: nextSeq(), metrics: [
    { name: 'Level1', alias: 10, type: 'Float', value: 1.25 },
    { name: 'Level2', alias: 11, type: 'Double', value: 2.5 },
    { name: 'Running', alias: 12, type: 'Boolean', value: true },
  ] });
  assertEq((await waitPoint('sp-e1-temp', (p) => p.quality === 'good')).value, 20.5, 'birth value');
  assertEq((await waitPoint('sp-e1-count', (p) => p.quality === 'good')).value, -5, 'signed Int32');
  assertEq((await waitPoint('sp-d1-level-1', (p) => p.quality === 'good')).value, 1.25, 'device birth');
  assertEq((await waitPoint('sp-d1-run', (p) => p.quality === 'good')).value, true, 'bool');
  await send('NDATA', 'E1', null, { seq: nextSeq(), metrics: [{ alias: 1, type: 'Double', value: 21.75, timestamp: 1764460800000 }, { alias: 3, type: 'Float', value: 9 }] });
  await send('DDATA', 'E1', 'D1', { seq: nextSeq(), metrics: [{ alias: 11, type: 'Double', value: 7.5 }, { alias: 12, type: 'Boolean', value: false }] });
  const t = await waitPoint('sp-e1-temp', (p) => p.value === 21.75);
  assertEq(t.ts, 1764460800000, 'the metric timestamp is the source time');
  await waitPoint('sp-d1-level-2', (p) => p.value === 7.5);
  await waitPoint('sp-d1-run', (p) => p.value === false);
  const n = await node('G1/E1');
  assert(n && n.connected && n.errors === 0, `node health: ${JSON.stringify(n)}`);
});

await test('sparkplug: two points on one metric both follow it', async () => {
  const a = await point('sp-e1-temp'), b = await waitPoint('sp-e1-temp2', (p) => p.quality === 'good');
  assertEq([a.value, b.value], [21.75, 22], 'the same metric as double and as int');
  await send('NDATA', 'E1', null, { seq: nextSeq(), metrics: [{ alias: 1, type: 'Double', value: 30.25 }] });
  await waitPoint('sp-e1-temp', (p) => p.value === 30.25);
  await waitPoint('sp-e1-temp2', (p) => p.value === 30 && p.quality === 'good');
});

await test('sparkplug: a metric of an unknown data type (99) turns its point bad, counted', async () => {
  const e0 = (await node('G1/E1')).errors;
  const buf = Buffer.from(sp.encodePayload({ timestamp: Date.now(), seq: nextSeq(),
    metrics: [{ name: 'Odd', type: 'Double', value: 1.5 }] }));
  const at = buf.indexOf(Buffer.from([0x20, 0x0a, 0x69])); // datatype 10 (Double), then double_value
  assert(at >= 0, 'the datatype field found in the payload');
  buf[at + 1] = 99;
  await send('NDATA', 'E1', null, buf);
  // Until the message is applied the point is bad for another reason (no value yet).
  const p = await waitPoint('sp-e1-odd', (x) => x.quality === 'bad' && /data type/.test(x.reason || ''));
  assert(/data type that is not a Sparkplug scalar/.test(p.reason), `reason: ${p.reason}`);
  const n = await node('G1/E1');
  assert(n.errors > e0 && /data type 99/.test(n.last_error), `node health: ${JSON.stringify(n)}`);
  assertEq((await point('sp-e1-temp')).quality, 'good', 'other metrics unaffected');
});

await test('sparkplug: a sequence gap requests a rebirth (values still applied)', async () => {
  const t0 = Date.now();
  seq = (seq + 5) % 256; // skip five
  await send('NDATA', 'E1', null, { seq: nextSeq(), metrics: [{ alias: 2, type: 'Int32', value: 77 }] });
  await rebirthFor('E1', t0);
  await waitPoint('sp-e1-count', (p) => p.value === 77);
  const n = await node('G1/E1');
  assert(n.errors >= 1 && /sequence gap/.test(n.last_error), `node health: ${JSON.stringify(n)}`);
});

await test('sparkplug: the rebirth is answered, an unknown alias requests another', async () => {
  seq = 0;
  await send('NBIRTH', 'E1', null, { seq: nextSeq(), metrics: [
    { name: 'bdSeq', type: 'UInt64', value: 4 },
    { name: 'Process/Temp', alias: 1, type: 'Double', value: 30 },
    { name: 'Count', alias: 2, type: 'Int32', value: 1 },
  ] });
  await waitPoint('sp-e1-temp', (p) => p.value === 30);
  const t0 = Date.now();
  await send('NDATA', 'E1', null, { seq: nextSeq(), metrics: [{ alias: 99, type: 'Double', value: 1 }] });
  await rebirthFor('E1', t0);
  // the device must be born again after an NBIRTH: its data is not applied before
  await send('DDATA', 'E1', 'D1', { seq: nextSeq(), metrics: [{ alias: 11, type: 'Double', value: 99 }] });
  await sleep(300);
  assertEq((await point('sp-d1-level-2')).value, 7.5, 'device data before its new birth is ignored');
  await send('DBIRTH', 'E1', 'D1', { seq: nextSeq(), metrics: [
    { name: 'Level1', alias: 10, type: 'Float', value: 4 },
    { name: 'Level2', alias: 11, type: 'Double', value: 5 },
    { name: 'Running', alias: 12, type: 'Boolean', value: true },
  ] });
  await waitPoint('sp-d1-level-2', (p) => p.value === 5 && p.quality === 'good');
});

await test('sparkplug: data before NBIRTH requests a rebirth and is not applied', async () => {
  // requests to a node that has not answered are spaced by 2 s: wait out the one at connect
  const last = Math.max(...ncmds.filter((c) => c.node === 'E2').map((c) => c.at));
  await sleep(Math.max(0, last + 2100 - Date.now()));
  const t0 = Date.now();
  await send('NDATA', 'E2', null, { seq: 5, metrics: [{ name: 'Flag', type: 'Boolean', value: true }] });
  await rebirthFor('E2', t0);
  const p = await point('sp-e2-flag');
  assert(p.value === null || p.value === undefined, `not applied: ${JSON.stringify(p)}`);
});

await test('sparkplug: a malformed payload is counted and changes nothing', async () => {
  const m0 = (await metrics(d)).get('opsd_driver_malformed_total{driver="spb"}');
  await send('NDATA', 'E1', null, Buffer.from([0x12, 0xff, 0xff, 0xff, 0x0f, 0x01]));
  await send('NDATA', 'E1', null, Buffer.from('not protobuf at all, just text'));
  await waitFor('malformed counted', async () =>
    (await metrics(d)).get('opsd_driver_malformed_total{driver="spb"}') >= m0 + 2);
  assertEq((await point('sp-e1-temp')).quality, 'good', 'points unchanged');
});

await test('sparkplug: DDEATH turns the device points bad, the node stays good', async () => {
  await send('DDEATH', 'E1', 'D1', { seq: nextSeq(), metrics: [] });
  const p = await waitPoint('sp-d1-level-1', (x) => x.quality === 'bad');
  assert(/DDEATH/.test(p.reason), `reason: ${p.reason}`);
  assertEq((await point('sp-d1-run')).quality, 'bad', 'sp-d1-run');
  assertEq((await point('sp-e1-temp')).quality, 'good', 'node metric');
});

await test('sparkplug: NDEATH of an old session is ignored; of the current one turns all bad', async () => {
  await send('NDEATH', 'E1', null, { metrics: [{ name: 'bdSeq', type: 'UInt64', value: 3 }] });
  await sleep(300);
  assertEq((await point('sp-e1-temp')).quality, 'good', 'stale bdSeq 3 ignored');
  await send('NDEATH', 'E1', null, { metrics: [{ name: 'bdSeq', type: 'UInt64', value: 4 }] });
  const p = await waitPoint('sp-e1-temp', (x) => x.quality === 'bad');
  assert(/NDEATH/.test(p.reason), `reason: ${p.reason}`);
  assertEq((await point('sp-e1-count')).quality, 'bad', 'sp-e1-count');
  const n = await node('G1/E1');
  assertEq(n.connected, false, 'node offline in the health report');
  const m = await metrics(d);
  assertEq(m.get('opsd_driver_device_connected{driver="spb",device="G1/E1"}'), 0, 'metric');
});

await test('sparkplug: after a broker outage the host resubscribes and asks for births again', async () => {
  await broker.stop();
  await waitPoint('sp-e2-flag', (x) => x.quality === 'bad' && /lost/.test(x.reason || ''), 5000);
  const t0 = Date.now();
  await broker.start();
  // opsd asks every node for a rebirth when it connects; if it connected before the edge had
  // resubscribed (mqtt.js retries every 300 ms), data without a birth makes it ask again
  // (it forgot the births when the connection was lost)
  try {
    await rebirthFor('E2', t0);
  } catch {
    if (!edge.connected) await new Promise((r) => edge.once('connect', r));
    const t1 = Date.now();
    await waitFor('a rebirth request after data without birth', async () => {
      await send('NDATA', 'E2', null, { seq: 1, metrics: [{ name: 'Flag', type: 'Boolean', value: false }] });
      await sleep(300);
      return ncmds.find((c) => c.node === 'E2' && c.at >= t1);
    }, 6000);
  }
  await send('NBIRTH', 'E2', null, { seq: 0, metrics: [{ name: 'bdSeq', type: 'UInt64', value: 0 }, { name: 'Flag', alias: 1, type: 'Boolean', value: true }] });
  await waitPoint('sp-e2-flag', (x) => x.quality === 'good' && x.value === true, 5000);
});

await test('sparkplug: SIGTERM stops the driver cleanly', async () => {
  const e = await d.stop('SIGTERM', 5000);
  assertEq(e.killed, false, 'stopped within 5 s');
  assertEq(e.code, 0, 'exit status');
  const rep = work.sanitizerReport();
  assert(!rep, `sanitizer: ${rep}`);
});

await finish();

// MQTT driver over TLS with MQTT 5, and writes: Debian's mosquitto started by the test with a
// TLS listener (certificates made here with openssl: a CA, the broker's certificate for
// 127.0.0.1, a client certificate the broker requires), the test's own clients (npm `mqtt`,
// `sparkplug-payload`) on a plain listener of the same broker. Values arrive over TLS with
// MQTT 5; a broker certificate from another CA is refused (verification on by default);
// writes to plain topics arrive as text and JSON on the command topics; writes to Sparkplug
// metrics arrive as DCMD/NCMD by the alias and data type of the birth; a write the value
// cannot fit is refused before anything is sent. docs/drivers.md "MQTT".
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import mqtt from 'mqtt';
import sparkplug from 'sparkplug-payload';
import { test, finish, assert, assertEq, sleep, failTest, onCleanup } from './lib/harness.mjs';
import { workDir, startOpsd, http, freePort } from './lib/opsd.mjs';
import { MosquittoBroker } from './lib/mqtt_broker.mjs';

const sp = sparkplug.get('spBv1.0');
const work = workDir('t_mqtt_tls_write');
const f = (n) => join(work.dir, n);

function certs() {
  const ssl = (...a) => execFileSync('openssl', a, { stdio: 'pipe' });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  ssl('req', '-x509', ...ec, '-keyout', f('ca.key'), '-out', f('ca.crt'), '-days', '2', '-subj', '/CN=opsd test CA');
  ssl('req', '-x509', ...ec, '-keyout', f('other.key'), '-out', f('other.crt'), '-days', '2', '-subj', '/CN=another CA');
  writeFileSync(f('san.ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\n');
  for (const who of ['broker', 'client']) {
    ssl('req', ...ec, '-keyout', f(`${who}.key`), '-out', f(`${who}.csr`), '-subj', `/CN=${who}`);
    ssl('x509', '-req', '-in', f(`${who}.csr`), '-CA', f('ca.crt'), '-CAkey', f('ca.key'), '-CAcreateserial',
      '-out', f(`${who}.crt`), '-days', '2', '-extfile', f('san.ext'));
  }
}

let d, broker, edge, bport, tport;
const got = []; // [topic, payload Buffer]
try {
  certs();
  bport = await freePort();
  tport = await freePort();
  // user: as root mosquitto would drop to its own user, who cannot read the test's private dir
  broker = new MosquittoBroker({ port: bport, dir: work.dir, extra: `user ${process.getuid() === 0 ? 'root' : 'mosquitto'}
listener ${tport} 127.0.0.1
cafile ${f('ca.crt')}
certfile ${f('broker.crt')}
keyfile ${f('broker.key')}
require_certificate true
log_dest stderr
log_type all
` });
  await broker.start();
  edge = mqtt.connect(`mqtt://127.0.0.1:${bport}`, { reconnectPeriod: 300 });
  onCleanup(() => edge.end(true));
  await new Promise((resolve, reject) => { edge.once('connect', resolve); edge.once('error', reject); });
  edge.on('message', (topic, payload) => got.push([topic, payload]));
  await new Promise((resolve, reject) => edge.subscribe(['cmd/#', 'spBv1.0/G9/NCMD/+', 'spBv1.0/G9/DCMD/+/+'],
    { qos: 1 }, (e) => (e ? reject(e) : resolve())));
  d = await startOpsd(work, {
    config: (port, dataDir) => `server:
  listen: 127.0.0.1:${port}
  data_dir: ${dataDir}
drivers:
  - type: mqtt
    name: secure
    host: 127.0.0.1
    port: ${tport}
    protocol: "5"
    client_id: opsd-secure
    backoff_max: 1s
    tls: {ca: ${f('ca.crt')}, cert: ${f('client.crt')}, key: ${f('client.key')}}
    sparkplug: {group: G9, host_id: opsd-host}
    points:
      - {name: "room-{1..2}-sp", type: double, topic: "site/room{1..2}/sp", writable: true, command_topic: "cmd/room{1..2}/sp"}
      - {name: "mode", type: string, topic: "site/mode", value: "$.v", writable: true, command_topic: "cmd/mode", command_payload: json}
      - {name: "e9-speed", type: double, node: E9, metric: "Speed", writable: true}
      - {name: "e9-pump-{1..2}", type: int, node: E9, device: P, metric: "Pump{1..2}/Set", writable: true}
      - {name: "e9-run", type: bool, node: E9, device: P, metric: "Run", writable: true}
  - type: mqtt
    name: wrongca
    host: 127.0.0.1
    port: ${tport}
    backoff_max: 1s
    tls: {ca: ${f('other.crt')}, cert: ${f('client.crt')}, key: ${f('client.key')}}
    points:
      - {name: "never", type: double, topic: "site/room1/sp"}
`,
  });
} catch (e) {
  failTest('mqtt tls: certificates, broker and opsd start', e.stack || e.message);
  work.keep = true;
  await finish();
}

const point = async (name) => (await http(d, 'GET', `/api/v1/points/${name}`)).json;
const pub = (topic, payload, opts = { qos: 1 }) => new Promise((resolve, reject) =>
  edge.publish(topic, payload, opts, (e) => (e ? reject(e) : resolve())));
async function until(cond, ms, what) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    const r = await cond();
    if (r) return r;
    await sleep(50);
  }
  throw new Error(`${what}: not within ${ms} ms`);
}

await test('TLS with a client certificate and MQTT 5: values arrive', async () => {
  await until(async () => (await http(d, 'GET', '/api/v1/drivers/secure')).json.devices[0].connected, 8000,
    'the broker connected');
  await pub('site/room1/sp', '21.5');
  await pub('site/mode', '{"v":"auto"}');
  await until(async () => (await point('room-1-sp')).value === 21.5, 3000, 'room-1-sp');
  await until(async () => (await point('mode')).value === 'auto', 3000, 'mode');
  assert(/New client connected from 127\.0\.0\.1:\d+ as opsd-secure \(p5,/.test(broker.log), 'MQTT 5 (p5) in the broker log');
});

await test('a broker certificate from another CA is refused: the points say so', async () => {
  const p = await until(async () => { const x = await point('never'); return x.quality === 'bad' && /TLS|certificate|connect/i.test(x.reason || '') ? x : null; }, 8000, 'never bad');
  const h = (await http(d, 'GET', '/api/v1/drivers/wrongca')).json;
  assertEq(h.connected, false, 'not connected');
  assert(h.devices[0].errors > 0, `errors: ${JSON.stringify(h.devices[0])}`);
  assert(p.reason.startsWith(`127.0.0.1:${tport}: `), p.reason);
  assert(/certificate verify failed/.test(p.reason), `the reason says why: ${p.reason}`);
});

await test('writes to plain topics: text and JSON on the command topics', async () => {
  let r = await http(d, 'PUT', '/api/v1/points/room-2-sp', { value: 19.25 });
  assertEq(r.status, 200, r.text);
  assertEq(r.json.written, true, 'written');
  const t = await until(() => got.find(([topic]) => topic === 'cmd/room2/sp'), 3000, 'cmd/room2/sp');
  assertEq(t[1].toString(), '19.25', 'text payload');
  r = await http(d, 'PUT', '/api/v1/points/mode', { value: 'manual' });
  assertEq(r.status, 200, r.text);
  const j = await until(() => got.find(([topic]) => topic === 'cmd/mode'), 3000, 'cmd/mode');
  const body = JSON.parse(j[1].toString());
  assertEq(body.value, 'manual', 'JSON value');
  assert(Math.abs(body.time - Date.now()) < 10000, 'JSON time');
  r = await http(d, 'PUT', '/api/v1/points/never', { value: 1 });
  assertEq(r.status, 409, `not writable: ${r.text}`);
});

await test('Sparkplug writes: DCMD and NCMD by the alias and data type of the birth', async () => {
  const r0 = await http(d, 'PUT', '/api/v1/points/e9-speed', { value: 3 });
  assertEq(r0.status, 502, `before the birth: ${r0.text}`);
  assert(/not online/.test(r0.text), r0.text);
  await pub('spBv1.0/G9/NBIRTH/E9', sp.encodePayload({ timestamp: Date.now(), seq: 0, metrics: [
    { name: 'bdSeq', type: 'UInt64', value: 1 }, { name: 'Speed', alias: 5, type: 'Float', value: 1.5 }] }));
  await pub('spBv1.0/G9/DBIRTH/E9/P', sp.encodePayload({ timestamp: Date.now(), seq: 1, metrics: [
    { name: 'Pump1/Set', alias: 21, type: 'Int16', value: 10 }, { name: 'Pump2/Set', alias: 22, type: 'UInt8', value: 20 },
    { name: 'Run', alias: 23, type: 'Boolean', value: false }] }));
  await until(async () => (await point('e9-pump-2')).value === 20, 3000, 'birth applied');
  let r = await http(d, 'PUT', '/api/v1/points/e9-pump-1', { value: -300 });
  assertEq(r.status, 200, r.text);
  const c = await until(() => got.find(([topic]) => topic === 'spBv1.0/G9/DCMD/E9/P'), 3000, 'DCMD');
  const m = sp.decodePayload(c[1]).metrics[0];
  assertEq([Number(m.alias), m.type, m.value], [21, 'Int16', -300], 'DCMD metric by alias, Int16');
  r = await http(d, 'PUT', '/api/v1/points/e9-speed', { value: 2.5 });
  assertEq(r.status, 200, r.text);
  const ncmd = () => got.filter(([topic]) => topic === 'spBv1.0/G9/NCMD/E9').map(([, b]) => sp.decodePayload(b).metrics[0])
    .find((x) => x.name !== 'Node Control/Rebirth'); // not the rebirth requests
  const nm = await until(ncmd, 3000, 'NCMD');
  assertEq([Number(nm.alias), nm.type, nm.value], [5, 'Float', 2.5], 'NCMD metric');
  r = await http(d, 'PUT', '/api/v1/points/e9-pump-2', { value: 300 });
  assertEq(r.status, 502, `UInt8 out of range: ${r.text}`);
  assert(/range/.test(r.text), r.text);
});

await test('Sparkplug primary host STATE: retained birth, then death with the same timestamp on stop', async () => {
  const states = [];
  const probe = mqtt.connect(`mqtt://127.0.0.1:${bport}`);
  onCleanup(() => probe.end(true));
  await new Promise((resolve, reject) => { probe.once('connect', resolve); probe.once('error', reject); });
  probe.on('message', (topic, payload, pk) => states.push({ topic, retain: pk.retain, ...JSON.parse(payload.toString()) }));
  await new Promise((resolve, reject) => probe.subscribe('spBv1.0/STATE/+', { qos: 1 }, (e) => (e ? reject(e) : resolve())));
  const birth = await until(() => states.find((x) => x.online === true), 3000, 'retained STATE birth');
  assertEq([birth.topic, birth.retain], ['spBv1.0/STATE/opsd-host', true], 'topic, retained');
  assert(Math.abs(birth.timestamp - Date.now()) < 60000, `timestamp ${birth.timestamp}`);
  await d.stop('SIGTERM', 5000);
  const death = await until(() => states.find((x) => x.online === false), 3000, 'STATE death');
  assertEq(death.timestamp, birth.timestamp, 'death timestamp = birth timestamp');
});

await finish();

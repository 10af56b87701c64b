// WebSocket stream /api/v1/stream: subscribe by list and prefix, first update carries every
// value, later ones only changes, deadband, interval, unsubscribe, errors, ping.
// docs/API.md "WebSocket stream". Client: the npm package `ws`.
import { test, finish, assert, assertEq, sleep, failTest } from './lib/harness.mjs';
import { workDir, startOpsd, standardConfig, http, metrics, Client } from './lib/opsd.mjs';

const work = workDir('t_stream');
let d;
try {
  d = await startOpsd(work, { config: (port, dataDir) => standardConfig({ port, dataDir }) });
} catch (e) {
  failTest('stream: opsd starts', e.message);
  work.keep = true;
  await finish();
}
await sleep(600); // the simulator's first values (period 200 ms)

const post = (samples) => http(d, 'POST', '/api/v1/samples', { samples });
const names = (u) => u.values.map((v) => v[0]);
const valueOf = (u, name) => {
  const v = u.values.find((x) => x[0] === name);
  return v ? v[1] : undefined;
};

function checkValueShape(v) {
  assert(Array.isArray(v) && (v.length === 4 || v.length === 5), `value ${JSON.stringify(v)} is not [name, value, ts, quality(, reason)]`);
  assert(typeof v[0] === 'string', `name in ${JSON.stringify(v)}`);
  assert(Number.isInteger(v[2]) || v[2] === null, `ts in ${JSON.stringify(v)} is not integer ms`);
  assert(['good', 'uncertain', 'bad'].includes(v[3]), `quality in ${JSON.stringify(v)}`);
  if (v[3] === 'good') assert(v.length === 4, `a good value has 4 elements: ${JSON.stringify(v)}`);
  else assert(v.length === 5 && typeof v[4] === 'string', `a value that is not good carries a reason: ${JSON.stringify(v)}`);
}

const c = await Client.connect(d.wsUrl).catch((e) => {
  failTest('stream: WebSocket connects', e.message);
  return null;
});
if (!c) await finish();

await test('ping is answered pong', async () => {
  c.send({ op: 'ping' });
  await c.next((m) => m.op === 'pong', 3000, 'a pong');
});

await test('subscribe by list: first update carries every current value', async () => {
  await post([{ point: 'ext-001', value: 10.25 }]);
  c.send({ op: 'subscribe', id: 'l1', points: ['tank1-0001', 'tank1-0002', 'ext-000', 'ext-001'], interval: '100ms' });
  const u = await c.update('l1');
  assertEq(names(u).slice().sort(), ['ext-000', 'ext-001', 'tank1-0001', 'tank1-0002'], 'names in the first update');
  u.values.forEach(checkValueShape);
  const e0 = u.values.find((v) => v[0] === 'ext-000');
  assertEq([e0[1], e0[3], e0[4]], [null, 'bad', 'no value yet'], 'ext-000 (never written)');
  const e1 = u.values.find((v) => v[0] === 'ext-001');
  assertEq([e1[1], e1[3]], [10.25, 'good'], 'ext-001');
  const t = u.values.find((v) => v[0] === 'tank1-0001');
  assert(typeof t[1] === 'number' && t[3] === 'good', `tank1-0001 ${JSON.stringify(t)}`);
  assert(Math.abs(Date.now() - t[2]) < 10000, `tank1-0001 ts ${t[2]} is not recent`);
});

await test('later updates carry only changed points (simulator changes every period)', async () => {
  const ups = await c.during(1500, (m) => m.op === 'update' && m.id === 'l1');
  assert(ups.length >= 3, `expected several updates in 1.5 s (period 200ms), got ${ups.length}`);
  for (const u of ups) {
    u.values.forEach(checkValueShape);
    const n = names(u);
    assert(!n.includes('ext-000') && !n.includes('ext-001'), `unchanged ext points sent again: ${JSON.stringify(n)}`);
  }
  assert(ups.some((u) => names(u).includes('tank1-0001')), 'tank1-0001 never updated');
  const r = await post([{ point: 'ext-000', value: 7.5 }]);
  assertEq(r.status, 200, 'POST samples status');
  const u = await c.next((m) => m.op === 'update' && m.id === 'l1' && names(m).includes('ext-000'), 3000, 'an update with ext-000');
  assertEq(valueOf(u, 'ext-000'), 7.5, 'ext-000 value');
  assert(!names(u).includes('ext-001'), 'ext-001 did not change but was sent');
});

await test('interval: at most one update frame per interval per subscription', async () => {
  c.send({ op: 'subscribe', id: 'slow', points: ['tank1-0003'], interval: 1000 });
  await c.update('slow');
  const ups = await c.during(3300, (m) => m.op === 'update' && m.id === 'slow');
  assert(ups.length >= 2 && ups.length <= 4, `interval 1000 ms over 3.3 s: expected 2-4 frames, got ${ups.length}`);
  for (let i = 1; i < ups.length; i++) {
    assert(ups[i]._t - ups[i - 1]._t >= 800, `two frames ${ups[i]._t - ups[i - 1]._t} ms apart with interval 1s`);
  }
  c.send({ op: 'unsubscribe', id: 'slow' });
  await c.next((m) => m.op === 'unsubscribed' && m.id === 'slow', 3000, 'unsubscribed slow');
});

await test('unsubscribe: answered unsubscribed, then no more updates for that id', async () => {
  c.send({ op: 'unsubscribe', id: 'l1' });
  await c.next((m) => m.op === 'unsubscribed' && m.id === 'l1', 3000, 'unsubscribed l1');
  await sleep(300); // a frame already in flight may still arrive
  c.take((m) => m.id === 'l1');
  const late = await c.during(1000, (m) => m.op === 'update' && m.id === 'l1');
  assertEq(late.length, 0, 'updates for l1 after unsubscribe');
});

await test('subscribe by prefix: first update has every matching point', async () => {
  c.send({ op: 'subscribe', id: 'p1', prefix: 'tank1-', interval: '200ms' });
  const u = await c.update('p1');
  u.values.forEach(checkValueShape);
  const n = new Set(names(u));
  assertEq(n.size, 100, 'distinct points in the first prefix update');
  assert([...n].every((x) => x.startsWith('tank1-')), 'a point not matching the prefix');
  const u2 = await c.update('p1', 3000);
  assert(u2.values.length > 0 && names(u2).every((x) => x.startsWith('tank1-')), 'second prefix update');
  c.send({ op: 'unsubscribe', id: 'p1' });
  await c.next((m) => m.op === 'unsubscribed' && m.id === 'p1', 3000, 'unsubscribed p1');
});

await test('subscribe by prefix with no match is allowed (no error)', async () => {
  c.send({ op: 'subscribe', id: 'empty', prefix: 'zzz-', interval: '100ms' });
  const got = await c.during(800, (m) => m.id === 'empty');
  const errs = got.filter((m) => m.op === 'error');
  assertEq(errs.length, 0, `errors for an empty prefix match ${JSON.stringify(errs)}`);
  for (const u of got.filter((m) => m.op === 'update')) assertEq(u.values, [], 'values of the empty subscription');
  c.send({ op: 'unsubscribe', id: 'empty' });
  await c.next((m) => m.op === 'unsubscribed' && m.id === 'empty', 3000, 'unsubscribed empty');
});

await test('deadband: small moves suppressed, big moves and quality changes sent', async () => {
  await post([{ point: 'ext-002', value: 10 }]);
  c.send({ op: 'subscribe', id: 'db', points: ['ext-002'], interval: '50ms', deadband: 1.0 });
  const first = await c.update('db');
  assertEq(valueOf(first, 'ext-002'), 10, 'first value');
  const step = async (value, quality) => {
    const s = { point: 'ext-002', value };
    if (quality) s.quality = quality;
    const r = await post([s]);
    assertEq(r.status, 200, `POST ${value}`);
    return c.during(400, (m) => m.op === 'update' && m.id === 'db');
  };
  let ups = await step(10.5);
  assertEq(ups.length, 0, 'updates after a 0.5 move (deadband 1)');
  ups = await step(10.9);
  assertEq(ups.length, 0, 'updates after 10.9 (0.9 from the last value sent, 10)');
  ups = await step(11.5);
  assertEq(ups.map((u) => valueOf(u, 'ext-002')), [11.5], 'update after 11.5 (1.5 from 10)');
  ups = await step(12.0);
  assertEq(ups.length, 0, 'updates after 12.0 (0.5 from 11.5)');
  ups = await step(10.4);
  assertEq(ups.map((u) => valueOf(u, 'ext-002')), [10.4], 'update after 10.4 (1.1 down from 11.5)');
  ups = await step(10.4, 'uncertain');
  assertEq(ups.length, 1, 'update after a quality change');
  const v = ups[0].values[0];
  assertEq([v[0], v[1], v[3]], ['ext-002', 10.4, 'uncertain'], 'value after the quality change');
  assert(v.length === 5, `an uncertain value carries a reason: ${JSON.stringify(v)}`);
  c.send({ op: 'unsubscribe', id: 'db' });
  await c.next((m) => m.op === 'unsubscribed' && m.id === 'db', 3000, 'unsubscribed db');
});

await test('deadband on a simulator point: consecutive values sent differ by more than it', async () => {
  c.send({ op: 'subscribe', id: 'sdb', points: ['tank1-0010'], interval: '50ms', deadband: 10 });
  c.send({ op: 'subscribe', id: 'sall', points: ['tank1-0010'], interval: '50ms' });
  await c.update('sdb');
  await c.update('sall');
  await sleep(3000);
  const db = c.take((m) => m.op === 'update' && m.id === 'sdb').map((u) => valueOf(u, 'tank1-0010'));
  const all = c.take((m) => m.op === 'update' && m.id === 'sall').map((u) => valueOf(u, 'tank1-0010'));
  assert(all.length >= 8, `without deadband: expected >= 8 updates in 3 s, got ${all.length}`);
  assert(db.length < all.length, `deadband 10 sent ${db.length} updates, no deadband ${all.length}`);
  for (let i = 1; i < db.length; i++) {
    assert(Math.abs(db[i] - db[i - 1]) > 10, `deadband 10: consecutive values ${db[i - 1]} -> ${db[i]}`);
  }
  c.send({ op: 'unsubscribe', id: 'sdb' });
  c.send({ op: 'unsubscribe', id: 'sall' });
  await c.next((m) => m.op === 'unsubscribed' && m.id === 'sall', 3000, 'unsubscribed sall');
});

await test('subscribing again with a used id replaces the subscription', async () => {
  c.send({ op: 'subscribe', id: 'r', points: ['ext-003'], interval: '50ms' });
  await c.update('r');
  c.send({ op: 'subscribe', id: 'r', points: ['ext-004'], interval: '50ms' });
  const u = await c.next((m) => m.op === 'update' && m.id === 'r' && names(m).includes('ext-004'), 3000, 'the replacement first update');
  assertEq(names(u), ['ext-004'], 'the replacement first update');
  await post([{ point: 'ext-003', value: 3 }, { point: 'ext-004', value: 4 }]);
  const ups = await c.during(600, (m) => m.op === 'update' && m.id === 'r');
  assert(ups.length >= 1, 'no update after ext-004 changed');
  for (const x of ups) assert(!names(x).includes('ext-003'), `ext-003 still sent to the replaced subscription: ${JSON.stringify(x)}`);
  c.send({ op: 'unsubscribe', id: 'r' });
  await c.next((m) => m.op === 'unsubscribed' && m.id === 'r', 3000, 'unsubscribed r');
});

await test('unknown point: error op unknown_point, subscription refused whole', async () => {
  c.send({ op: 'subscribe', id: 'bad', points: ['tank1-0001', 'no-such-point'], interval: '50ms' });
  const e = await c.error('bad');
  assertEq(e.error && e.error.code, 'unknown_point', 'error code');
  assert(typeof e.error.message === 'string', 'error message');
  const ups = await c.during(500, (m) => m.op === 'update' && m.id === 'bad');
  assertEq(ups.length, 0, 'updates for a refused subscription');
});

await test('malformed JSON frame: error op, the connection stays usable', async () => {
  c.send('{"op":"subscribe", "id": ');
  const e = await c.next((m) => m.op === 'error', 3000, 'an error op');
  assert(e.error && typeof e.error.code === 'string', `error shape ${JSON.stringify(e)}`);
  assertEq(e.error.code, 'invalid_json', 'error code');
  assert(!c.closeInfo, 'connection closed');
  c.send({ op: 'ping' });
  await c.next((m) => m.op === 'pong', 3000, 'a pong after the bad frame');
  c.send({ op: 'subscribe', id: 'after', points: ['ext-005'], interval: '50ms' });
  await c.update('after');
  c.send({ op: 'unsubscribe', id: 'after' });
  await c.next((m) => m.op === 'unsubscribed' && m.id === 'after', 3000, 'unsubscribed after');
});

await test('bad requests (unknown op, no id, id over 64 bytes): error op, connection usable', async () => {
  c.send({ op: 'frobnicate', id: 'x1' });
  await c.next((m) => m.op === 'error', 3000, 'an error for an unknown op');
  c.send({ op: 'subscribe', points: ['ext-005'] });
  await c.next((m) => m.op === 'error', 3000, 'an error for a subscribe without id');
  c.send({ op: 'subscribe', id: 'x'.repeat(65), points: ['ext-005'] });
  await c.next((m) => m.op === 'error', 3000, 'an error for a 65-byte id');
  c.send({ op: 'subscribe', id: 'y'.repeat(64), points: ['ext-005'], interval: '50ms' });
  await c.update('y'.repeat(64));
  c.send({ op: 'unsubscribe', id: 'y'.repeat(64) });
  await c.next((m) => m.op === 'unsubscribed', 3000, 'unsubscribed');
  assert(!c.closeInfo, 'connection closed');
});

await test('status and metrics count stream clients and subscriptions', async () => {
  const c2 = await Client.connect(d.wsUrl);
  c2.send({ op: 'subscribe', id: 'a', points: ['ext-006'] });
  c2.send({ op: 'subscribe', id: 'b', prefix: 'tank1-00' });
  await c2.update('a');
  await c2.update('b');
  const s = await http(d, 'GET', '/api/v1/status');
  assertEq(s.status, 200, 'GET /api/v1/status');
  assertEq(s.json.clients, 2, 'status.clients');
  assertEq(s.json.subscriptions, 2, 'status.subscriptions');
  const m = await metrics(d);
  assertEq(m.get('opsd_stream_clients'), 2, 'opsd_stream_clients');
  assertEq(m.get('opsd_stream_subscriptions'), 2, 'opsd_stream_subscriptions');
  assert(m.get('opsd_stream_values_sent_total') > 0, 'opsd_stream_values_sent_total');
  assert(m.get('opsd_stream_frames_sent_total') > 0, 'opsd_stream_frames_sent_total');
  assert(m.get('opsd_stream_bytes_sent_total') > 0, 'opsd_stream_bytes_sent_total');
  c2.close();
  await c2.closed;
  const deadline = Date.now() + 3000;
  let st;
  do {
    await sleep(100);
    st = (await http(d, 'GET', '/api/v1/status')).json;
  } while ((st.clients !== 1 || st.subscriptions !== 0) && Date.now() < deadline);
  assertEq([st.clients, st.subscriptions], [1, 0], 'clients and subscriptions after the second client left');
});

await test('SIGTERM with a connected client: exit status 0 within 5 s', async () => {
  c.send({ op: 'subscribe', id: 'last', prefix: 'tank1-', interval: '50ms' });
  await c.update('last');
  const r = await d.stop('SIGTERM', 5000);
  assert(!r.killed, 'opsd did not exit within 5 s of SIGTERM');
  assertEq([r.code, r.signal], [0, null], 'exit status');
  await Promise.race([c.closed, sleep(3000)]);
  assert(c.closeInfo, 'the client was not disconnected');
});

await test('stream: no sanitizer report in the opsd log', async () => {
  const rep = work.sanitizerReport();
  assert(!rep, rep);
});

await finish();

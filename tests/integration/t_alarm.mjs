// Alarms against the real daemon: an alarm raised by writing a point (PUT), summary filters,
// ack with user and comment (viewer refused, unknown names change nothing), shelving,
// deployment switch (admin) re-evaluating, events query, a storm of 9,000 events all stored,
// the WebSocket summary subscription with a filter (snapshot, exactly the matching changes,
// removals, a storm's rows each once and a snapshot when its view empties), and a restart
// keeping the state.
// docs/API.md "Alarms". Clients: fetch and the npm package `ws`.
import { join } from 'node:path';
import { test, finish, assert, assertEq, sleep, failTest } from './lib/harness.mjs';
import { workDir, startOpsd, standardConfig, http, metrics, Client } from './lib/opsd.mjs';

const work = workDir('t_alarm');
const dataDir = join(work.dir, 'data');
const alarms = `deployment:
  state: Normal
  states:
    Normal:  {loadMax: 380, loadMin: 250}
    Startup: {loadMax: 420, loadMin: 100}
alarms:
  - area: Intake
    each: {i: "000..002"}
    group: "intake"
    name: "load-$i"
    expression: "{ext-$i} + {ext-009}"
    thresholds:
      - {name: HH, op: ">=", limit: loadMax, deadband: 5, priority: 1,
         message: "Total intake tank load too high: {value:#,##0.00}, exceeds {limit:#,##0.00}"}
      - {name: LL, op: "<=", limit: loadMin, priority: 2, message: "load low: {value:0.0}"}
  - area: Store
    each: {k: "0..2999"}
    group: "storm"
    name: "s-$k"
    expression: "count - $k"
    thresholds:
      - {name: H, op: ">", limit: 0, priority: 3}
`;
const auth = `  auth:
    tokens:
      - {name: viewer1, token: v-tok, role: viewer}
      - {name: ops, token: o-tok, role: operator}
      - {name: boss, token: a-tok, role: admin}`;
const config = (port) => standardConfig({ port, dataDir, auth, pointsExtra: alarms });

let d;
try {
  d = await startOpsd(work, { config });
} catch (e) {
  failTest('alarm: opsd starts', e.message);
  await finish();
}

const H = (tok) => ({ Authorization: `Bearer ${tok}` });
const ops = H('o-tok');
const as = (method, path, body, tok = 'o-tok') => http(d, method, path, body, H(tok));
const ids = (r) => r.json.alarms.map((a) => a.id).join();
const put = async (point, value) => {
  const r = await as('PUT', `/api/v1/points/${point}`, { value });
  assertEq(r.status, 200, `PUT ${point}`);
};
const errorOf = (r, status, code, what) => {
  assertEq(r.status, status, `${what}: status (${r.text.slice(0, 200)})`);
  assertEq(r.json && r.json.error && r.json.error.code, code, `${what}: error code`);
  assert(typeof r.json.error.message === 'string', `${what}: an error message`);
};

const ws = await Client.connect(`${d.wsUrl}?token=v-tok`).catch((e) => {
  failTest('alarm: WebSocket connects', e.message);
  return null;
});
if (!ws) await finish();

await test('stream: subscribe_alarms answers a snapshot of the matching alarms', async () => {
  ws.send({ op: 'subscribe_alarms', id: 'a1', filter: { group: 'intake', state: 'active' } });
  const m = await ws.next((x) => x.op === 'alarms' && x.id === 'a1', 5000, 'a snapshot');
  assertEq(m.alarms.length, 0, 'nothing active yet');
  assertEq(m.total, 0, 'total');
  ws.send({ op: 'subscribe_alarms', id: 'all', filter: { state: 'all', q: 'load-00' } });
  const all = await ws.next((x) => x.op === 'alarms' && x.id === 'all', 5000, 'a snapshot');
  assertEq(all.alarms.length, 6, 'every condition of load-00x');
  for (const bad of [{ state: 'nope' }, { colour: 'red' }, { priority: 0 }, 'x']) {
    ws.send({ op: 'subscribe_alarms', id: 'bad', filter: bad });
    const e = await ws.error('bad');
    assertEq(e.error.code, 'bad_filter', `filter ${JSON.stringify(bad)}`);
  }
  ws.send({ op: 'unsubscribe', id: 'all' });
  await ws.next((x) => x.op === 'unsubscribed' && x.id === 'all', 3000, 'unsubscribed');
});

await test('writing a point raises its alarm; the subscriber gets exactly that change', async () => {
  await put('ext-009', 90);
  await put('ext-000', 300.5);
  const r = await as('GET', '/api/v1/alarms?state=active');
  assertEq(r.status, 200, 'summary');
  assertEq(ids(r), 'load-000/HH', 'active');
  const a = r.json.alarms[0];
  assertEq(a.state, 'active_unack', 'state');
  assertEq(a.area, 'Intake', 'area');
  assertEq(a.message, 'Total intake tank load too high: 390.50, exceeds 380.00', 'message');
  const c = await ws.next((x) => x.op === 'alarm_changes' && x.id === 'a1', 5000, 'a change');
  assertEq(c.changes.map((x) => `${x.id}:${x.state}`).join(), 'load-000/HH:active_unack', 'the change');
});

await test('summary filters (state, priority, text, group, area, sort) and errors', async () => {
  await put('ext-001', 100); // 190 <= 250: LL
  assertEq((await as('GET', '/api/v1/alarms')).json.total, 2, 'not normal');
  assertEq(ids(await as('GET', '/api/v1/alarms?priority=2')), 'load-001/LL', 'priority');
  assertEq(ids(await as('GET', '/api/v1/alarms?q=TOO%20HIGH')), 'load-000/HH', 'text');
  assertEq((await as('GET', '/api/v1/alarms?group=storm')).json.total, 0, 'group');
  assertEq(ids(await as('GET', '/api/v1/alarms?area=Intake&sort=name')), 'load-000/HH,load-001/LL', 'area, sort');
  assertEq((await as('GET', '/api/v1/alarms?state=normal&group=intake')).json.total, 4, 'normal');
  assertEq(ids(await as('GET', '/api/v1/alarms/load-001')), 'load-001/HH,load-001/LL', 'one alarm');
  errorOf(await as('GET', '/api/v1/alarms?state=bogus'), 400, 'bad_request', 'bad state');
  errorOf(await as('GET', '/api/v1/alarms?priority=0'), 400, 'bad_request', 'bad priority');
  errorOf(await as('GET', '/api/v1/alarms?sort=colour'), 400, 'bad_request', 'bad sort');
  errorOf(await as('GET', '/api/v1/alarms/nope'), 404, 'unknown_alarm', 'unknown alarm');
  errorOf(await http(d, 'GET', '/api/v1/alarms'), 401, 'unauthorized', 'no token');
});

await test('ack one and by group with user and comment; viewer and unknown names change nothing', async () => {
  errorOf(await as('POST', '/api/v1/alarms/ack', { alarms: ['load-000'] }, 'v-tok'), 403, 'forbidden', 'viewer');
  errorOf(await as('POST', '/api/v1/alarms/ack', { alarms: ['load-000', 'nope'] }), 404, 'unknown_alarm', 'unknown');
  errorOf(await as('POST', '/api/v1/alarms/ack', { alarms: [] }), 400, 'bad_request', 'empty list');
  errorOf(await as('POST', '/api/v1/alarms/ack', '{bad'), 400, 'invalid_json', 'bad JSON');
  assertEq((await as('GET', '/api/v1/alarms?state=unack')).json.total, 2, 'nothing acknowledged');
  let r = await as('POST', '/api/v1/alarms/ack', { alarms: ['load-000/HH'], comment: 'checked the pumps' });
  assertEq(r.status, 200, 'ack');
  assertEq(r.json.acknowledged, 1, 'acknowledged');
  r = await as('POST', '/api/v1/alarms/ack', { alarms: ['load-000/HH'] });
  assertEq(r.json.unchanged, 1, 'again: unchanged');
  r = await as('GET', '/api/v1/alarms?state=acked');
  assertEq(ids(r), 'load-000/HH', 'acked');
  assertEq(r.json.alarms[0].ack.user, 'ops', 'user');
  assertEq(r.json.alarms[0].ack.comment, 'checked the pumps', 'comment');
  r = await as('POST', '/api/v1/alarms/ack', { group: 'intake', comment: 'all' });
  assertEq(r.json.acknowledged, 1, 'group ack');
  errorOf(await as('POST', '/api/v1/alarms/ack', { group: 'nope' }), 404, 'unknown_group', 'unknown group');
});

await test('shelve with a duration hides from active; unshelve; out of service needs admin', async () => {
  let r = await as('POST', '/api/v1/alarms/shelve', { alarms: ['load-001/LL'], duration: '1h', comment: 'sensor work' });
  assertEq(r.status, 200, 'shelve');
  assertEq(ids(await as('GET', '/api/v1/alarms?state=shelved')), 'load-001/LL', 'shelved');
  assertEq(ids(await as('GET', '/api/v1/alarms?state=active')), 'load-000/HH', 'hidden from active');
  errorOf(await as('POST', '/api/v1/alarms/shelve', { alarms: ['load-001/LL'], duration: '40d' }), 400, 'bad_request', '40d');
  r = await as('POST', '/api/v1/alarms/unshelve', { alarms: ['load-001/LL'] });
  assertEq(r.json.unshelved, 1, 'unshelved');
  errorOf(await as('POST', '/api/v1/alarms/service', { alarms: ['load-002'], in_service: false }), 403, 'forbidden', 'operator');
  r = await as('POST', '/api/v1/alarms/service', { alarms: ['load-002'], in_service: false }, 'a-tok');
  assertEq(r.json.changed, 2, 'out of service');
  assertEq(ids(await as('GET', '/api/v1/alarms?state=out_of_service')), 'load-002/HH,load-002/LL', 'oos');
  r = await as('POST', '/api/v1/alarms/service', { alarms: ['load-002'], in_service: true }, 'a-tok');
  assertEq(r.json.changed, 2, 'in service');
});

await test('deployment state: admin switch re-evaluates every alarm; stream sees removals', async () => {
  let r = await as('GET', '/api/v1/deployment/state');
  assertEq(r.json.state, 'Normal', 'state');
  assertEq(r.json.states.Startup.loadMax, 420, 'variables');
  errorOf(await as('PUT', '/api/v1/deployment/state', { state: 'Startup' }), 403, 'forbidden', 'operator');
  errorOf(await as('PUT', '/api/v1/deployment/state', { state: 'Nope' }, 'a-tok'), 404, 'unknown_state', 'unknown');
  ws.take();
  r = await as('PUT', '/api/v1/deployment/state', { state: 'Startup' }, 'a-tok');
  assertEq(r.status, 200, 'switch');
  assertEq(r.json.state, 'Startup', 'new state');
  assertEq((await as('GET', '/api/v1/alarms?state=active')).json.total, 0, '390.5 < 420 and 190 > 100: both clear');
  const c = await ws.next((x) => x.op === 'alarm_changes' && x.id === 'a1', 5000, 'a change');
  assertEq(JSON.stringify(c.changes), JSON.stringify([{ id: 'load-000/HH', removed: true }, { id: 'load-001/LL', removed: true }]),
    'removed from the active filter');
  r = await as('PUT', '/api/v1/deployment/state', { state: 'Normal' }, 'a-tok');
  assertEq(ids(await as('GET', '/api/v1/alarms?state=active&sort=name')), 'load-000/HH,load-001/LL', 'back');
});

await test('events query: by alarm, group, kind, text, time range; errors', async () => {
  let r = await as('GET', '/api/v1/alarm-events?alarm=load-000/HH');
  assertEq(r.status, 200, 'events');
  assertEq(r.json.events.map((e) => e.kind).join(), 'active,ack,clear,active', `kinds (${JSON.stringify((await as('GET', '/api/v1/alarm-events')).json.events.map((e) => [e.alarm, e.threshold, e.kind, e.state, e.ts]))})`);
  assertEq(r.json.events[1].user, 'ops', 'ack user');
  assertEq(r.json.events[1].comment, 'checked the pumps', 'ack comment');
  assertEq(r.json.events[0].message, 'Total intake tank load too high: 390.50, exceeds 380.00', 'message');
  r = await as('GET', '/api/v1/alarm-events?group=intake&kind=ack&order=desc&limit=1');
  assertEq([r.json.count, r.json.more, r.json.events[0].comment].join(), '1,true,all', 'group, kind, order, limit');
  r = await as('GET', '/api/v1/alarm-events?q=sensor%20work');
  assertEq(r.json.events.map((e) => e.kind).join(), 'shelve', 'text');
  r = await as('GET', '/api/v1/alarm-events?kind=deployment');
  assertEq(r.json.events.map((e) => `${e.message}/${e.user}`).join(), 'Startup/boss,Normal/boss', 'deployment');
  r = await as('GET', '/api/v1/alarm-events?from=2020-01-01T00:00:00Z&to=2020-01-02T00:00:00Z');
  assertEq(r.json.count, 0, 'empty range');
  errorOf(await as('GET', '/api/v1/alarm-events?from=yesterday'), 400, 'bad_request', 'bad from');
  errorOf(await as('GET', '/api/v1/alarm-events?kind=nope'), 400, 'bad_request', 'bad kind');
  errorOf(await as('GET', '/api/v1/alarm-events?from=10&to=5'), 400, 'bad_request', 'to before from');
});

const stormEvents = async () => (await as('GET', '/api/v1/alarm-events?group=storm&limit=100000')).json.count;

await test('a storm of 9,000 events: every one stored; a filtered subscriber gets each row once, a snapshot when the view empties, another nothing', async () => {
  ws.send({ op: 'subscribe_alarms', id: 'st', filter: { group: 'storm', state: 'active' } });
  await ws.next((x) => x.op === 'alarms' && x.id === 'st', 5000, 'the storm snapshot');
  ws.take();
  const view = new Map();
  let snapshots = 0, rows = 0;
  // Applies the subscriber's frames until its view holds `want` rows and nothing more waits.
  const follow = async (want, what) => {
    const deadline = Date.now() + 8000;
    while (Date.now() < deadline) {
      const m = await ws.next((x) => x.id === 'st' && (x.op === 'alarms' || x.op === 'alarm_changes'), 8000, what);
      if (m.op === 'alarms') {
        snapshots++;
        view.clear();
        for (const a of m.alarms) view.set(a.id, a);
      } else {
        for (const c of m.changes) {
          rows++;
          if (c.removed) view.delete(c.id);
          else view.set(c.id, c);
        }
      }
      if (view.size === want && !ws.msgs.some((x) => x.id === 'st')) return;
    }
    throw new Error(`${what}: the view has ${view.size} rows, not ${want}`);
  };
  const post = async (v) => assertEq((await as('POST', '/api/v1/samples', { samples: [{ point: 'count', value: v }] })).status, 200, 'samples');
  await post(3000);
  await follow(3000, 'raised');
  assertEq([snapshots, rows].join(), '0,3000', 'the 3,000 raised rows as changes, each once');
  assert([...view.values()].every((a) => a.group === 'storm' && a.state === 'active_unack'), 'only matching rows');
  // All 3,000 clear at once: a snapshot (empty) is smaller than 3,000 removals.
  await post(0);
  await follow(0, 'cleared');
  assertEq(snapshots, 1, 'a fresh snapshot instead of 3,000 removed rows');
  await post(3000);
  await follow(3000, 'raised again');
  assertEq(snapshots, 1, 'raised again: changes');
  let n = 0;
  for (let i = 0; i < 100 && n !== 9000; i++) {
    n = await stormEvents();
    if (n !== 9000) await sleep(100);
  }
  assertEq(n, 9000, 'events stored (3,000 raised, cleared, raised)');
  assertEq((await as('GET', '/api/v1/alarms?group=storm&state=active&limit=1')).json.total, 3000, 'active');
  assert([...view.values()].every((a) => a.group === 'storm' && a.state === 'active_unack'), 'only matching rows');
  assertEq(ws.take((x) => x.id === 'a1').length, 0, 'the intake subscriber got nothing from the storm');
  const m = await metrics(d, ops);
  assertEq(m.get('opsd_alarm_events_dropped_total'), 0, 'nothing dropped');
  assert(m.get('opsd_alarm_events_written_total') >= 9000, 'written metric');
  assertEq(m.get('opsd_alarm_active'), 3002, 'active metric');
}, { timeout: 30000 });

await test('a reload that reorders the conditions sends subscribers a fresh snapshot with the right rows', async () => {
  ws.send({ op: 'subscribe_alarms', id: 'rl', filter: { group: 'intake', state: 'all' } });
  await ws.next((x) => x.op === 'alarms' && x.id === 'rl', 5000, 'the first snapshot');
  // A new alarm first in the list: every condition's index moves by one.
  const { readFileSync, writeFileSync } = await import('node:fs');
  const text = readFileSync(d.configPath, 'utf8').replace('alarms:\n', `alarms:
  - {name: early, group: intake, expression: "{ext-008}", thresholds: [{name: H, op: ">", limit: 5}]}
`);
  await sleep(1100); // a visible mtime change
  writeFileSync(d.configPath, text);
  await put('ext-008', 9);
  const m = await ws.next((x) => x.op === 'alarms' && x.id === 'rl', 8000, 'a snapshot after the reload');
  const rows = m.alarms.map((a) => `${a.id}:${a.state}`).sort().join();
  assert(rows.startsWith('early/H:'), `the new alarm is there: ${rows}`);
  const r = await as('GET', '/api/v1/alarms?group=intake&state=all&sort=name');
  assertEq(rows, r.json.alarms.map((a) => `${a.id}:${a.state}`).sort().join(), 'the same rows as the summary');
  // ext-008 = 9 raises it, before or after the reload: in the snapshot or as a change.
  if (!m.alarms.some((a) => a.id === 'early/H' && a.state === 'active_unack')) {
    const c = await ws.next((x) => x.op === 'alarm_changes' && x.id === 'rl' && x.changes.some((y) => y.id === 'early/H'),
      5000, 'the new alarm raised');
    assertEq(c.changes.find((y) => y.id === 'early/H').state, 'active_unack', 'raised');
  }
  const empty = ws.take((x) => x.raw !== undefined);
  assertEq(empty.length, 0, 'frames that are not JSON');
  ws.send({ op: 'unsubscribe', id: 'rl' });
}, { timeout: 20000 });

await test('a restart keeps every condition, the deployment and the events', async () => {
  const key = (r) => JSON.stringify(r.json.alarms.map((a) => [a.id, a.state, a.message, a.ack && a.ack.comment, a.since]));
  await as('PUT', '/api/v1/deployment/state', { state: 'Startup' }, 'a-tok');
  const before = await as('GET', '/api/v1/alarms?state=all&area=Intake&sort=name');
  ws.close();
  const st = await d.stop('SIGTERM', 15000);
  assertEq(st.code, 0, 'clean stop');
  d = await startOpsd(work, { config });
  const after = await as('GET', '/api/v1/alarms?state=all&area=Intake&sort=name');
  assertEq(key(after), key(before), 'same conditions');
  assertEq((await as('GET', '/api/v1/deployment/state')).json.state, 'Startup', 'deployment');
  assertEq((await as('GET', '/api/v1/alarms?group=storm&state=active&limit=1')).json.total, 3000, 'storm state');
  assertEq(await stormEvents(), 9000, 'events kept');
}, { timeout: 40000 });

await test('kill -9 right after an answer: the state comes back from the events (state.db is written later)', async () => {
  const key = (r) => JSON.stringify(r.json.alarms.map((a) => [a.id, a.state, a.message, a.ack && a.ack.comment, a.since]));
  assertEq((await as('POST', '/api/v1/samples', { samples: [{ point: 'count', value: 0 }] })).status, 200, 'clear');
  assertEq((await as('POST', '/api/v1/samples', { samples: [{ point: 'count', value: 3000 }] })).status, 200, 'raise');
  const before = await as('GET', '/api/v1/alarms?state=all&group=storm&sort=name&limit=5000');
  // An acknowledgement is answered once durable; SIGKILL follows at once, well inside the
  // writer's 200 ms wait before it writes state.db.
  const acked = await as('POST', '/api/v1/alarms/ack', { alarms: ['s-1'], comment: 'seen before the crash' });
  const st = await d.stop('SIGKILL', 5000);
  assertEq(acked.status, 200, 'ack');
  assertEq(st.signal, 'SIGKILL', 'killed');
  d = await startOpsd(work, { config });
  assert(/events replayed into the saved state/.test(d.log()), `the state was replayed: ${d.log().slice(-400)}`);
  const after = await as('GET', '/api/v1/alarms?state=all&group=storm&sort=name&limit=5000');
  assertEq(after.json.alarms.length, 3000, 'every storm condition');
  const s1 = after.json.alarms.find((a) => a.id === 's-1/H');
  assertEq([s1.state, s1.ack && s1.ack.comment].join(), 'active_ack,seen before the crash', 'the ack kept');
  const others = (r) => ({ json: { alarms: r.json.alarms.filter((a) => a.id !== 's-1/H') } });
  assertEq(key(others(after)), key(others(before)), 'the other states, messages and times');
  assertEq((await as('GET', '/api/v1/deployment/state')).json.state, 'Startup', 'deployment');
}, { timeout: 40000 });

await test('alarm: no sanitizer report in the opsd logs', async () => {
  await d.stop('SIGTERM', 15000);
  const rep = work.sanitizerReport();
  assert(!rep, rep);
});

await finish();

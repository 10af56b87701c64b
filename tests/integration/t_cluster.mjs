// Cluster on NATS JetStream: three real nats-server processes (JetStream, clustered on
// loopback) and three opsd nodes a, b, c. A simulator driver with candidates [a, b, c] runs on
// a only; a WebSocket client on b sees its points, the first update carrying every current
// value; outside points written on any node; a reload everywhere keeps the leases; opsctl;
// malformed live batches on the subject are counted and dropped whole; kill -9 of the owner:
// b owns the driver within lease + 2 s and the client's values resume; a restarted a does
// not take it back (failback off); a clean stop hands the unit over at once. The NATS and
// process faults are in t_cluster_faults.mjs. Skips only when nats-server is not installed.
import { spawnSync } from 'node:child_process';
import { test, finish, assert, assertEq, sleep, failTest, diag } from './lib/harness.mjs';
import { http, metrics, Client } from './lib/opsd.mjs';
import { publishRaw } from './lib/nats_cluster.mjs';
import { LEASE_MS, setup, cluster, waitOwner, waitFresh, waitValue } from './lib/cluster.mjs';

// sim2 runs only on b: a unit whose owner is not a's, for requests that span two owners. Its
// point changes once a week (written by samples, it keeps what was written).
const env = await setup('t_cluster', { drivers: `  - type: simulator
    name: sim2
    nodes: [b]
    points:
      - {name: "s2-1", type: double, pattern: constant, period: 168h, min: 1, max: 1}
      - {name: "s2-text", type: string, pattern: constant, period: 168h}` });
const { work, nats, nodes } = env;
const names = (u) => u.values.map((v) => v[0]);

await test('cluster: node a starts and owns the driver and the points unit', async () => {
  await env.start('a');
  await waitOwner(nodes.a, 'sim1', ['a'], 10000, 'node a alone');
  await waitOwner(nodes.a, 'points', ['a'], 5000, 'node a alone');
}, { timeout: 20000 });

await test('cluster: nodes b and c start; a keeps its units; every node lists the others', async () => {
  await env.start('b');
  await env.start('c');
  await sleep(1500);
  for (const n of ['b', 'c']) {
    const c = await cluster(nodes[n]);
    assertEq(c.node, n, 'node name');
    assertEq(c.nats.state, 'connected', `node ${n} NATS state`);
    const u = c.units.find((x) => x.name === 'sim1');
    assertEq(u.owner, 'a', `sim1 owner seen from ${n}`);
    assertEq(u.candidates, ['a', 'b', 'c'], 'candidates');
    const others = c.nodes.filter((x) => !x.self).map((x) => x.name).sort();
    assert(others.includes('a'), `node ${n} does not list a: ${JSON.stringify(c.nodes)}`);
  }
  const drv = await http(nodes.b, 'GET', '/api/v1/drivers');
  assertEq(drv.status, 200, 'drivers');
}, { timeout: 20000 });

let ws;
await test('cluster: a WebSocket client on b sees a\'s points, the first update with every current value', async () => {
  // The snapshot reaches b soon after it starts; wait until b holds good values.
  const t0 = Date.now();
  for (;;) {
    const r = await http(nodes.b, 'GET', '/api/v1/points/cl-20');
    if (r.status === 200 && r.json.quality === 'good') break;
    if (Date.now() - t0 > 8000) throw new Error(`cl-20 on b is not good after 8 s: ${r.text}`);
    await sleep(100);
  }
  ws = await Client.connect(nodes.b.wsUrl);
  ws.send({ op: 'subscribe', id: 's', prefix: 'cl-', interval: '100ms' });
  const u = await ws.update('s', 5000);
  const want = Array.from({ length: 20 }, (_, i) => `cl-${String(i + 1).padStart(2, '0')}`).concat(['cl-sum']).sort();
  assertEq(names(u).slice().sort(), want, 'names in the first update');
  for (const v of u.values) {
    assert(typeof v[1] === 'number' && v[3] === 'good', `value ${JSON.stringify(v)} is not a good number`);
    assert(Math.abs(Date.now() - v[2]) < 5000, `value ${JSON.stringify(v)} is not recent`);
  }
  const later = await ws.during(1200, (m) => m.op === 'update' && m.id === 's');
  assert(later.length >= 3, `expected a stream of updates from a's driver on b, got ${later.length} in 1.2 s`);
  // The calculated point is computed on b from the mirrored inputs.
  const s = await http(nodes.b, 'GET', '/api/v1/points/cl-sum');
  assertEq(s.json.quality, 'good', 'cl-sum on b');
}, { timeout: 20000 });

await test('cluster: metrics show the link and the mirrored values', async () => {
  const mb = await metrics(nodes.b);
  const ma = await metrics(nodes.a);
  assertEq(mb.get('opsd_cluster_nats_connected'), 1, 'b connected');
  assert(mb.get('opsd_cluster_live_values_total{dir="in"}') > 20, 'b applied mirrored values');
  assert(ma.get('opsd_cluster_live_values_total{dir="out"}') > 20, 'a published values');
  assert(ma.get('opsd_cluster_lease_renewals_total{result="ok"}') >= 2, 'a renews its leases');
  assertEq(ma.get('opsd_cluster_units_owned'), 2, 'a owns two units');
});

await test('cluster: outside points: written on any node, made by the owner of the points unit, mirrored everywhere', async () => {
  const w = await http(nodes.a, 'PUT', '/api/v1/points/ext-1', { value: 42.5 });
  assertEq(w.status, 200, `PUT on a, the owner (${w.text})`);
  await waitValue(nodes.c, 'ext-1', 42.5, 3000, 'c after the write on a');
  const m0 = await metrics(nodes.b);
  const f = await http(nodes.b, 'PUT', '/api/v1/points/ext-1', { value: 7.25 });
  assertEq(f.status, 200, `PUT on b, forwarded to a (${f.text})`);
  assertEq(f.json.written, true, 'written');
  await waitValue(nodes.a, 'ext-1', 7.25, 3000, 'a (the owner) after the write on b');
  await waitValue(nodes.c, 'ext-1', 7.25, 3000, 'c after the write on b');
  const m1 = await metrics(nodes.b);
  assertEq(m1.get('opsd_cluster_writes_total{kind="forwarded"}') - m0.get('opsd_cluster_writes_total{kind="forwarded"}'), 1,
    'writes forwarded by b');
  const bad = await http(nodes.c, 'PUT', '/api/v1/points/ext-1', { value: 'x' });
  assertEq(bad.status, 400, 'a value of the wrong type is refused where it arrives');
});

await test('cluster: samples and the line protocol on any node are applied by the owners of their units', async () => {
  await waitOwner(nodes.c, 'sim2', ['b'], 8000, 'sim2 on b');
  const before = { a: await metrics(nodes.a), b: await metrics(nodes.b), c: await metrics(nodes.c) };
  const delta = async (n, key) => (await metrics(nodes[n])).get(key) - before[n].get(key);
  // c runs no unit: one request for the points unit (a) and sim2 (b), a string among them.
  const r = await http(nodes.c, 'POST', '/api/v1/samples', { samples: [
    { point: 'ext-1', value: 11.5 }, { point: 's2-1', value: 21.5 }, { point: 's2-text', value: 'fünf "5"' }] });
  assertEq(r.status, 200, `POST /api/v1/samples on c (${r.text})`);
  assertEq(r.json.accepted, 3, 'accepted');
  // Answered once the owners applied them: the owners hold the values already.
  assertEq((await http(nodes.a, 'GET', '/api/v1/points/ext-1')).json.value, 11.5, 'ext-1 on a when c answered');
  assertEq((await http(nodes.b, 'GET', '/api/v1/points/s2-1')).json.value, 21.5, 's2-1 on b when c answered');
  await waitValue(nodes.c, 'ext-1', 11.5, 3000, 'c (mirrored from a)');
  await waitValue(nodes.c, 's2-text', 'fünf "5"', 3000, 'c (mirrored from b)');
  await waitValue(nodes.a, 's2-1', 21.5, 3000, 'a (mirrored from b)');
  assertEq(await delta('c', 'opsd_cluster_samples_total{kind="forwarded"}'), 3, 'samples forwarded by c');
  assertEq(await delta('a', 'opsd_cluster_samples_total{kind="served"}'), 1, 'samples applied by a for c');
  assertEq(await delta('b', 'opsd_cluster_samples_total{kind="served"}'), 2, 'samples applied by b for c');
  // The line protocol on b: one value for b's own unit, one for a's.
  const w = await http(nodes.b, 'POST', '/write?precision=ms', 'ext-1 value=12.5\ns2-1 value=22.5\n');
  assertEq(w.status, 204, `POST /write on b (${w.text})`);
  assertEq((await http(nodes.a, 'GET', '/api/v1/points/ext-1')).json.value, 12.5, 'ext-1 on a when b answered');
  await waitValue(nodes.c, 's2-1', 22.5, 3000, 'c after the line protocol on b');
  await waitValue(nodes.c, 'ext-1', 12.5, 3000, 'c after the line protocol on b');
  // The columnar form on c, with a sample older than the current value (history only).
  const now = Date.now();
  const col = await http(nodes.c, 'POST', '/api/v1/samples', { series: [
    { point: 'ext-1', ts: [now - 60000, now], values: [1, 13.5] }] });
  assertEq(col.status, 200, `columnar form on c (${col.text})`);
  await waitValue(nodes.c, 'ext-1', 13.5, 3000, 'c after the columnar form');
  // Bad input is refused where it arrives, and nothing is sent.
  const f0 = (await metrics(nodes.c)).get('opsd_cluster_samples_total{kind="forwarded"}');
  const bad = await http(nodes.c, 'POST', '/api/v1/samples', { samples: [{ point: 'ext-1', value: 99 }, { point: 'nope', value: 1 }] });
  assertEq(bad.status, 404, `an unknown point (${bad.text})`);
  const wt = await http(nodes.c, 'POST', '/write', 'ext-1 value=99\ns2-1 value="x"\n');
  assertEq(wt.status, 400, `a string for a double point (${wt.text})`);
  assertEq((await metrics(nodes.c)).get('opsd_cluster_samples_total{kind="forwarded"}'), f0, 'nothing forwarded');
  assertEq((await http(nodes.a, 'GET', '/api/v1/points/ext-1')).json.value, 13.5, 'ext-1 unchanged on a');
}, { timeout: 30000 });

await test('cluster: a reload on every node keeps the leases, restarts the driver on its owner, and mirrors the new point', async () => {
  env.rewrite('      - {name: "cl-new", type: int, pattern: ramp, period: 200ms, min: 0, max: 1000}');
  const t0 = Date.now();
  for (;;) {
    const r = await http(nodes.b, 'GET', '/api/v1/points/cl-new');
    if (r.status === 200 && r.json.quality === 'good' && typeof r.json.value === 'number') break;
    if (Date.now() - t0 > 8000) throw new Error(`cl-new on b after the reload: ${r.text}`);
    await sleep(100);
  }
  for (const n of ['b', 'c']) {
    const u = (await cluster(nodes[n])).units.find((x) => x.name === 'sim1');
    assertEq(u.owner, 'a', `sim1 owner after the reload, seen from ${n}`);
  }
  assert(/driver sim1 started \(this node owns it\)[\s\S]*reloaded/.test(nodes.a.log()) ||
    /reloaded[\s\S]*driver sim1 started/.test(nodes.a.log()), 'a restarted sim1 with the reload');
  await waitFresh(nodes.c, 'cl-01', Date.now() - 500, 3000, 'c after the reload');
}, { timeout: 20000 });

await test('cluster: opsctl cluster status on c shows the nodes and the owners', async () => {
  const r = spawnSync(process.env.OPSCTL, ['--url', nodes.c.url, 'cluster', 'status'], { encoding: 'utf8', timeout: 10000 });
  assertEq(r.status, 0, `opsctl exit status (${r.stderr})`);
  assert(/cluster itest, node c: NATS connected/.test(r.stdout), `first line: ${r.stdout.split('\n')[0]}`);
  const sim = r.stdout.split('\n').find((l) => l.startsWith('sim1 '));
  assert(sim && /\ba\b/.test(sim) && /a,b,c/.test(sim), `sim1 row: ${sim}`);
  assert(/^c \(here\)/m.test(r.stdout) && /^a /m.test(r.stdout), `node rows: ${r.stdout}`);
  const j = spawnSync(process.env.OPSCTL, ['--url', nodes.c.url, 'cluster', 'status', '--json'], { encoding: 'utf8', timeout: 10000 });
  assertEq(JSON.parse(j.stdout).node, 'c', 'the JSON form');
});

await test('cluster: malformed, truncated, oversized-count and wrong-version batches are counted and dropped whole', async () => {
  const before = (await metrics(nodes.b)).get('opsd_cluster_live_rejected_total{reason="malformed"}');
  const good = Buffer.alloc(36 + 16);
  good.write('OPLB', 0, 'latin1');
  good[4] = 1;
  good.writeBigUInt64LE(1n << 40n, 8); // a huge epoch: were it applied, it would fence out a
  good.writeUInt32LE(1, 32);
  // one item: name "cl-01", tag double good, ts delta 0, 8 bytes of value 12345
  const item = Buffer.concat([Buffer.from([5]), Buffer.from('cl-01'), Buffer.from([1 << 2, 0])]);
  const v = Buffer.alloc(8);
  v.writeDoubleLE(12345);
  const batch = Buffer.concat([good.subarray(0, 36), item, v]);
  const wrongVersion = Buffer.from(batch);
  wrongVersion[4] = 9;
  const truncated = batch.subarray(0, batch.length - 3);
  const badCount = Buffer.from(batch);
  badCount.writeUInt32LE(2, 32);
  await publishRaw(nats.urls[1], 'opsd.itest.live.sim1', [Buffer.from('garbage'), truncated, wrongVersion, badCount]);
  const t0 = Date.now();
  let after = before;
  while (Date.now() - t0 < 5000 && after < before + 4) {
    await sleep(100);
    after = (await metrics(nodes.b)).get('opsd_cluster_live_rejected_total{reason="malformed"}');
  }
  assertEq(after - before, 4, 'malformed batches counted on b');
  const p = await http(nodes.b, 'GET', '/api/v1/points/cl-01');
  assert(p.json.value !== 12345, 'a refused batch was applied');
  assert(/live batch for unit sim1 dropped/.test(nodes.b.log()), 'no log line for the dropped batch');
  // b still follows a.
  const u = await ws.next((m) => m.op === 'update' && m.id === 's', 3000, 'an update after the bad batches');
  assert(u.values.length > 0, 'empty update');
}, { timeout: 15000 });

await test(`cluster: kill -9 of the owner: b owns sim1 within lease + 2 s and values resume on b`, async () => {
  const killedAt = Date.now();
  nodes.a.proc.kill('SIGKILL');
  await nodes.a.exited;
  const [owner, ms] = await waitOwner(nodes.b, 'sim1', ['b', 'c'], LEASE_MS + 4000, 'after kill -9 of a');
  diag(`failover: ${owner} owns sim1 ${ms} ms after kill -9 (lease ${LEASE_MS} ms)`);
  assertEq(owner, 'b', 'the next live candidate in order');
  assert(Date.now() - killedAt <= LEASE_MS + 2000 + 300, `failover took ${Date.now() - killedAt} ms (lease ${LEASE_MS} ms + 2 s)`);
  const since = Date.now();
  const u = await ws.next((m) => m.op === 'update' && m.id === 's' &&
    m.values.some((v) => v[0].startsWith('cl-0') && v[3] === 'good' && v[2] >= since - 250), 4000, 'an update with new values from b');
  assert(u.values.length > 0, 'empty update');
  // c follows b now.
  const t0 = Date.now();
  for (;;) {
    const r = await http(nodes.c, 'GET', '/api/v1/points/cl-05');
    if (r.json.quality === 'good' && r.json.ts >= since - 250) break;
    if (Date.now() - t0 > 4000) throw new Error(`c does not follow b: ${r.text}`);
    await sleep(100);
  }
}, { timeout: 20000 });

await test('cluster: a restarted a does not take sim1 back (failback off) and mirrors it', async () => {
  await nodes.a.stop('SIGTERM', 1000);
  await env.start('a');
  await sleep(LEASE_MS + 1000);
  const c = await cluster(nodes.a);
  assertEq(c.units.find((x) => x.name === 'sim1').owner, 'b', 'sim1 owner after a returned');
  const r = await http(nodes.a, 'GET', '/api/v1/points/cl-03');
  assertEq(r.json.quality, 'good', `cl-03 on a (mirrored from b): ${r.text}`);
}, { timeout: 20000 });

await test('cluster: a clean stop of the owner hands the unit over at once', async () => {
  const t0 = Date.now();
  const r = await nodes.b.stop('SIGTERM', 5000);
  assertEq(r.code, 0, 'b exit status');
  const [owner, ms] = await waitOwner(nodes.c, 'sim1', ['a', 'c'], LEASE_MS + 3000, 'after b stopped');
  diag(`handover: ${owner} owns sim1 ${Date.now() - t0} ms after b was told to stop (${ms} ms after it exited)`);
  assertEq(owner, 'a', 'the first live candidate');
  assert(ms < LEASE_MS, `handover took ${ms} ms: the lease was not given up`);
  // sim2 had no other candidate: samples for it are refused whole, nothing applied.
  await waitOwner(nodes.c, 'sim2', [null], 3000, 'sim2 after b stopped');
  const s2 = await http(nodes.c, 'POST', '/api/v1/samples', { samples: [{ point: 'ext-1', value: 31 }, { point: 's2-1', value: 32 }] });
  assertEq(s2.status, 503, `samples for a unit without an owner (${s2.text})`);
  assertEq(s2.json.error.code, 'no_owner', 'code');
  assert(/unit sim2 \(point 's2-1'\) has no owner/.test(s2.json.error.message), s2.text);
  assert((await http(nodes.a, 'GET', '/api/v1/points/ext-1')).json.value !== 31, 'ext-1 was written');
}, { timeout: 15000 });

if (ws) ws.close();
const san = work.sanitizerReport();
if (san) failTest('cluster: no sanitizer report', san);
await finish();

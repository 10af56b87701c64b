// The isolated owner with `isolated: keep` (docs/cluster.md "Failure modes"), on three real
// nats-server processes and two opsd nodes: a (keep) owns the simulator driver, c (stop)
// mirrors it. Every NATS server down: a keeps reading (its values stay fresh), refuses writes
// to the points of its units, and says so in GET /api/v1/cluster; c shows the points bad "no
// owner". NATS back: a renews its lease again, takes writes again, c follows it again, all
// without a restart. Also failback: a second driver with candidates [c, a] and failback on
// starts on a (c is not there yet) and moves to c once c runs. Skips only when nats-server is
// not installed.
import { test, finish, assert, assertEq, sleep, failTest, diag } from './lib/harness.mjs';
import { http } from './lib/opsd.mjs';
import { LEASE_MS, setup, cluster, waitOwner, waitFresh } from './lib/cluster.mjs';

const env = await setup('t_cluster_isolated', {
  candidates: ['a', 'c'],
  isolated: { a: 'keep' },
  drivers: `  - type: simulator
    name: sim2
    nodes: [c, a]
    failback: true
    points:
      - {name: "fb-{1..3}", type: double, pattern: ramp, period: 200ms}`,
});
const { work, nats, nodes } = env;

await test('cluster isolated: a (isolated: keep) owns the drivers and the points unit; c mirrors them', async () => {
  await env.start('a');
  await waitOwner(nodes.a, 'sim1', ['a'], 15000, 'node a alone');
  await waitOwner(nodes.a, 'points', ['a'], 5000, 'node a alone');
  await waitOwner(nodes.a, 'sim2', ['a'], 5000, 'node a alone (sim2 prefers c, which is not there)');
  await env.start('c');
  await waitFresh(nodes.c, 'cl-01', Date.now(), 10000, 'c mirrors a');
}, { timeout: 30000 });

await test('cluster isolated: failback: sim2 (candidates c, a; failback on) goes to c once c is there', async () => {
  const [owner, ms] = await waitOwner(nodes.a, 'sim2', ['c'], 10000, 'after c joined');
  diag(`failback: ${owner} owns sim2 ${ms} ms after the check began`);
  assert(/unit sim2: handing it over to node 'c' \(failback\)/.test(nodes.a.log()), 'a did not log the handover');
  await waitFresh(nodes.a, 'fb-1', Date.now(), 5000, 'a mirrors sim2 from c');
  assertEq((await cluster(nodes.a)).units.find((x) => x.name === 'sim1').owner, 'a', 'sim1 (no failback) stays on a');
}, { timeout: 20000 });

await test('cluster isolated: every NATS server down: a keeps reading, refuses writes; c shows "no owner"', async () => {
  for (const sv of nats.servers) await sv.stop('SIGKILL');
  await sleep(LEASE_MS + 1000);
  await waitFresh(nodes.a, 'cl-04', Date.now() - 1000, 3000, 'a keeps its driver running');
  assert(/running isolated \(isolated: keep\)/.test(nodes.a.log()), 'a did not log that it runs isolated');
  const c = await cluster(nodes.a);
  const u = c.units.find((x) => x.name === 'sim1');
  assert(u.mine && u.isolated, `sim1 on a: ${JSON.stringify(u)}`);
  const w = await http(nodes.a, 'PUT', '/api/v1/points/ext-1', { value: 5 });
  assertEq(w.status, 409, `a write on a while isolated (${w.text})`);
  assert(/isolated: keep/.test(w.json.error.message), w.text);
  const p = await http(nodes.c, 'GET', '/api/v1/points/cl-04');
  assertEq([p.json.quality, p.json.reason], ['bad', 'no owner'], 'cl-04 on c');
}, { timeout: 20000 });

await test('cluster isolated: NATS back: a renews its lease, takes writes again, c follows it again', async () => {
  for (const sv of nats.servers) sv.start();
  const upAt = Date.now();
  const t0 = Date.now();
  for (;;) {
    const us = (await cluster(nodes.a)).units.filter((u) => u.name !== 'sim2');
    if (us.every((u) => u.mine && !u.isolated)) break;
    if (Date.now() - t0 > 30000) throw new Error(`a did not renew its leases after NATS came back: ${JSON.stringify(us)}`);
    await sleep(200);
  }
  diag(`a renewed its leases ${Date.now() - upAt} ms after NATS came back`);
  assert(!/unit sim1: this node stops owning it/.test(nodes.a.log()), 'a stopped sim1 at some point');
  await waitFresh(nodes.c, 'cl-04', upAt, 15000, 'c follows a again');
  const w = await http(nodes.a, 'PUT', '/api/v1/points/ext-1', { value: 6 });
  assertEq(w.status, 200, `a write on a (${w.text})`);
}, { timeout: 60000 });

const san = work.sanitizerReport();
if (san) failTest('cluster isolated: no sanitizer report', san);
await finish();

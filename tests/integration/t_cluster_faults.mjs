// Cluster faults, on three real nats-server processes (JetStream, clustered on loopback) and
// two opsd nodes a and c (the simulator driver's candidates, in that order): one NATS server
// killed (nothing visible changes, the owner rides out the bucket's leader election); the
// owner frozen (SIGSTOP) past its lease (c takes over; once resumed, a has given the unit up
// and does not take it back); every NATS server down (the owner stops, points go bad "no
// owner") and back (values resume, no restart); a write forwarded to a frozen owner (504).
// docs/cluster.md "Failure modes". Skips only when nats-server is not installed.
import { test, finish, assert, assertEq, sleep, failTest, diag } from './lib/harness.mjs';
import { http, metrics } from './lib/opsd.mjs';
import { LEASE_MS, setup, cluster, waitOwner, waitFresh } from './lib/cluster.mjs';

const env = await setup('t_cluster_faults', { candidates: ['a', 'c'] });
const { work, nats, nodes } = env;

await test('cluster faults: a owns the driver and the points unit; c mirrors them', async () => {
  await env.start('a');
  await waitOwner(nodes.a, 'sim1', ['a'], 15000, 'node a alone');
  await waitOwner(nodes.a, 'points', ['a'], 5000, 'node a alone');
  await env.start('c');
  await waitFresh(nodes.c, 'cl-01', Date.now(), 10000, 'c mirrors a');
}, { timeout: 30000 });

await test('cluster faults: one of three NATS servers killed: the owner keeps its units, values go on', async () => {
  const m0 = await metrics(nodes.a);
  await nats.servers[0].stop('SIGKILL');
  const t0 = Date.now();
  while (Date.now() - t0 < LEASE_MS + 2000) {
    const c = await cluster(nodes.c);
    assertEq(c.units.find((x) => x.name === 'sim1').owner, 'a', 'sim1 owner while a NATS server is down');
    await sleep(250);
  }
  await waitFresh(nodes.c, 'cl-07', Date.now() - 1000, 3000, 'c while a NATS server is down');
  const m1 = await metrics(nodes.a);
  assertEq(m1.get('opsd_cluster_lease_changes_total{change="lost"}'), m0.get('opsd_cluster_lease_changes_total{change="lost"}'),
    'leases lost by a');
  nats.servers[0].start();
}, { timeout: 20000 });

await test('cluster faults: SIGSTOP of the owner past its lease: c takes over; after SIGCONT a has given the unit up for good', async () => {
  const stoppedAt = Date.now();
  process.kill(nodes.a.pid, 'SIGSTOP');
  let owner;
  try {
    [owner] = await waitOwner(nodes.c, 'sim1', ['c'], LEASE_MS + 4000, 'while a is stopped');
    await sleep(Math.max(0, stoppedAt + LEASE_MS + 1000 - Date.now()));
  } finally {
    process.kill(nodes.a.pid, 'SIGCONT');
  }
  const contAt = Date.now();
  const t0 = Date.now();
  while (!/unit sim1: this node stops owning it/.test(nodes.a.log())) {
    if (Date.now() - t0 > 3000) throw new Error(`a did not give sim1 up after SIGCONT: ${nodes.a.log().slice(-600)}`);
    await sleep(50);
  }
  diag(`a stopped sim1 ${Date.now() - contAt} ms after SIGCONT`);
  await sleep(LEASE_MS + 500);
  const c = await cluster(nodes.a);
  assertEq(c.units.find((x) => x.name === 'sim1').owner, 'c', 'sim1 owner after a resumed (no failback)');
  await waitFresh(nodes.a, 'cl-09', Date.now() - 500, 3000, 'a mirrors c');
  await waitFresh(nodes.c, 'cl-09', Date.now() - 500, 3000, 'c runs sim1');
}, { timeout: 25000 });

await test('cluster faults: every NATS server down: the owner stops (isolated: stop), points go bad "no owner"; back: values resume without a restart', async () => {
  const downAt = Date.now();
  for (const sv of nats.servers) await sv.stop('SIGKILL');
  const t0 = Date.now();
  for (;;) {
    const r = await http(nodes.a, 'GET', '/api/v1/points/cl-11');
    if (r.json.quality === 'bad' && r.json.reason === 'no owner') break;
    if (Date.now() - t0 > LEASE_MS + 3000) throw new Error(`cl-11 on a is not bad 'no owner': ${r.text}`);
    await sleep(100);
  }
  const t1 = Date.now();
  while (!/unit sim1: this node stops owning it: the link to NATS is down/.test(nodes.c.log())) {
    if (Date.now() - t1 > LEASE_MS) throw new Error(`c did not stop sim1 without NATS: ${nodes.c.log().slice(-400)}`);
    await sleep(100);
  }
  diag(`without NATS: c stopped sim1 and a shows 'no owner' ${Date.now() - downAt} ms after the servers died`);
  for (const sv of nats.servers) sv.start();
  const upAt = Date.now();
  const [owner, ms] = await waitOwner(nodes.a, 'sim1', ['a', 'c'], 30000, 'after NATS came back');
  await waitFresh(nodes.a, 'cl-11', upAt, 20000, 'a after NATS came back');
  await waitFresh(nodes.c, 'cl-11', upAt, 20000, 'c after NATS came back');
  diag(`NATS back: ${owner} owns sim1 ${ms} ms later; values fresh on both nodes`);
}, { timeout: 60000 });

await test('cluster faults: writes are forwarded again after the outage; one to a frozen owner answers 504 after 5 s', async () => {
  const [owner] = await waitOwner(nodes.a, 'points', ['a', 'c'], 10000, 'the points unit after NATS came back');
  const frozen = nodes[owner];
  const other = owner === 'a' ? nodes.c : nodes.a;
  // First a forwarded write that works: the other node knows the owner again.
  const t0 = Date.now();
  for (;;) {
    const r = await http(other, 'PUT', '/api/v1/points/ext-1', { value: 3 });
    if (r.status === 200) break;
    if (Date.now() - t0 > 8000) throw new Error(`a write on the node that does not own 'points' fails: ${r.text}`);
    await sleep(200);
  }
  process.kill(frozen.pid, 'SIGSTOP');
  try {
    const t1 = Date.now();
    // A PUT, samples and the line protocol at once: each waits for the owner, then 504.
    const [r, s, w] = await Promise.all([
      http(other, 'PUT', '/api/v1/points/ext-1', { value: 99 }),
      http(other, 'POST', '/api/v1/samples', { samples: [{ point: 'ext-1', value: 98 }] }),
      http(other, 'POST', '/write', 'ext-1 value=97\n')]);
    const ms = Date.now() - t1;
    assertEq(r.status, 504, `status (${r.text})`);
    assertEq(r.json.error.code, 'owner_timeout', 'code');
    assert(new RegExp(`node ${owner}, the owner of unit points, did not answer`).test(r.json.error.message), r.text);
    assert(ms >= 4500 && ms < 8000, `answered after ${ms} ms`);
    assertEq(s.status, 504, `samples: status (${s.text})`);
    assertEq(s.json.error.code, 'owner_timeout', 'samples: code');
    assert(new RegExp(`node ${owner}, the owner of unit points, did not answer`).test(s.json.error.message), s.text);
    assertEq(w.status, 504, `line protocol: status (${w.text})`);
    assert(/did not answer within 5 s/.test(w.json.message), w.text);
  } finally {
    process.kill(frozen.pid, 'SIGCONT');
  }
}, { timeout: 20000 });

const san = work.sanitizerReport();
if (san) failTest('cluster faults: no sanitizer report', san);
await finish();

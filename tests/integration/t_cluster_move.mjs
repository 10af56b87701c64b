// Cluster operations: opsctl cluster move and drain against three real NATS servers and three
// opsd nodes (docs/cluster.md, "Moving units"). A move hands the simulator driver from a to b
// at once (no lease to wait for), the old owner's driver stopped before the new one started,
// with a client on c seeing values go on without a "no owner" in between; moves that cannot
// be made are refused with the reason; a drained node hands its units over, takes none even
// when it is the next candidate of a unit whose owner dies, and takes units again once
// undrained. Skips only when nats-server is not installed.
import { spawnSync } from 'node:child_process';
import { test, finish, assert, assertEq, sleep, failTest, diag } from './lib/harness.mjs';
import { http, Client } from './lib/opsd.mjs';
import { LEASE_MS, setup, cluster, waitOwner, waitFresh } from './lib/cluster.mjs';

const env = await setup('t_cluster_move');
const { work, nodes } = env;

const opsctl = (node, ...args) =>
  spawnSync(process.env.OPSCTL, ['--url', nodes[node].url, ...args], { encoding: 'utf8', timeout: 30000 });

// The time of the first log line of d matching re (ms), or null.
function logTime(d, re) {
  const line = d.log().split('\n').find((l) => re.test(l));
  return line ? Date.parse(line.slice(0, 24)) : null;
}

await test('cluster move: a owns sim1 and the points unit; b and c follow', async () => {
  await env.start('a');
  await waitOwner(nodes.a, 'sim1', ['a'], 10000, 'node a alone');
  await env.start('b');
  await env.start('c');
  await waitFresh(nodes.c, 'cl-01', Date.now() - 500, 8000, 'c mirrors a');
  await waitOwner(nodes.c, 'points', ['a'], 3000, 'the points unit');
  // Every node has heard the others (a heartbeat a second).
  const t0 = Date.now();
  for (const n of ['a', 'b', 'c']) {
    for (;;) {
      const heard = (await cluster(nodes[n])).nodes.filter((x) => x.connected).length;
      if (heard === 3) break;
      if (Date.now() - t0 > 5000) throw new Error(`node ${n} hears ${heard} nodes`);
      await sleep(100);
    }
  }
}, { timeout: 30000 });

await test('cluster move: opsctl cluster move sim1 b on c: b owns it at once, a stopped it first, values go on', async () => {
  const ws = await Client.connect(nodes.c.wsUrl);
  ws.send({ op: 'subscribe', id: 's', prefix: 'cl-', interval: '100ms' });
  await ws.update('s', 5000);
  const t0 = Date.now();
  const r = opsctl('c', 'cluster', 'move', 'sim1', 'b');
  const ms = Date.now() - t0;
  assertEq(r.status, 0, `opsctl exit status (${r.stdout} ${r.stderr})`);
  assert(/node a hands it over to node b/.test(r.stdout), r.stdout);
  assert(/unit sim1 runs on node b/.test(r.stdout), r.stdout);
  diag(`move: opsctl returned after ${ms} ms`);
  assert(ms < 3000, `the move took ${ms} ms: it should not wait for the lease (${LEASE_MS} ms)`);
  for (const n of ['a', 'b', 'c']) await waitOwner(nodes[n], 'sim1', ['b'], 2000, `sim1 seen from ${n}`);
  const stopped = logTime(nodes.a, /driver sim1 stopped \(this node no longer owns it\)/);
  const started = logTime(nodes.b, /driver sim1 started \(this node owns it\)/);
  assert(stopped && started, 'the stop on a and the start on b are logged');
  assert(stopped <= started, `b started sim1 (${started}) before a stopped it (${stopped})`);
  // The client on c: fresh values from b, never "no owner" on the way.
  const since = Date.now();
  const msgs = await ws.during(1500, (m) => m.op === 'update' && m.id === 's');
  assert(msgs.some((m) => m.values.some((v) => v[3] === 'good' && v[2] >= since - 250)), 'no fresh values from b on c');
  const bad = msgs.flatMap((m) => m.values).filter((v) => v[3] !== 'good');
  assertEq(bad.length, 0, `values that were not good during the move: ${JSON.stringify(bad.slice(0, 3))}`);
  ws.close();
  // Moving it where it is changes nothing.
  const again = await http(nodes.a, 'POST', '/api/v1/cluster/units/sim1/move', { node: 'b' });
  assertEq(again.status, 200, `a move to the owner (${again.text})`);
}, { timeout: 30000 });

await test('cluster move: refused with the reason: unknown unit, unknown node, bad body', async () => {
  const u = await http(nodes.a, 'POST', '/api/v1/cluster/units/nope/move', { node: 'b' });
  assertEq(u.status, 404, `unknown unit (${u.text})`);
  assertEq(u.json.error.code, 'unknown_unit', 'code');
  const n = await http(nodes.a, 'POST', '/api/v1/cluster/units/sim1/move', { node: 'zz' });
  assertEq(n.status, 409, `unknown node (${n.text})`);
  assertEq(n.json.error.code, 'not_a_candidate', 'code');
  const b = await http(nodes.a, 'POST', '/api/v1/cluster/units/sim1/move', { to: 'c' });
  assertEq(b.status, 400, `no node in the body (${b.text})`);
  const p = await http(nodes.a, 'POST', '/api/v1/cluster/units/sim1/jump', { node: 'c' });
  assertEq(p.status, 404, `unknown action (${p.text})`);
  const d = await http(nodes.a, 'POST', '/api/v1/cluster/nodes/zz/drain', {});
  assertEq(d.status, 404, `drain an unknown node (${d.text})`);
  const r = opsctl('a', 'cluster', 'move', 'sim1', 'zz');
  assertEq(r.status, 1, 'opsctl exit status');
  assert(/not_a_candidate/.test(r.stderr), r.stderr);
  await waitOwner(nodes.a, 'sim1', ['b'], 1000, 'sim1 still on b');
}, { timeout: 15000 });

await test('cluster drain: b hands sim1 over (to a, the next candidate) and shows drained', async () => {
  const r = opsctl('c', 'cluster', 'drain', 'b');
  assertEq(r.status, 0, `opsctl exit status (${r.stdout} ${r.stderr})`);
  assert(/node b runs no unit/.test(r.stdout), r.stdout);
  await waitOwner(nodes.c, 'sim1', ['a'], 2000, 'sim1 after the drain of b');
  const st = await cluster(nodes.c);
  assertEq(st.nodes.find((x) => x.name === 'b').drained, true, 'b drained, seen from c');
  assertEq((await cluster(nodes.b)).nodes.find((x) => x.self).drained, true, 'b drained, seen from b');
  // A drained node is no target for a move.
  const m = await http(nodes.c, 'POST', '/api/v1/cluster/units/sim1/move', { node: 'b' });
  assertEq(m.status, 409, `a move to a drained node (${m.text})`);
}, { timeout: 20000 });

await test('cluster drain: kill -9 of a: c takes sim1 and the points unit, not the drained b', async () => {
  nodes.a.proc.kill('SIGKILL');
  await nodes.a.exited;
  const [owner] = await waitOwner(nodes.c, 'sim1', ['b', 'c'], LEASE_MS + 4000, 'after kill -9 of a');
  assertEq(owner, 'c', 'the first candidate that takes units');
  const [powner] = await waitOwner(nodes.c, 'points', ['b', 'c'], 4000, 'the points unit after kill -9 of a');
  assertEq(powner, 'c', 'points unit owner');
  await sleep(1000);
  assertEq((await cluster(nodes.b)).nodes.find((x) => x.self).units, [], 'b took nothing');
}, { timeout: 20000 });

await test('cluster undrain: b takes units again (a move to b works)', async () => {
  const r = opsctl('c', 'cluster', 'undrain', 'b');
  assertEq(r.status, 0, `opsctl exit status (${r.stdout} ${r.stderr})`);
  const t0 = Date.now();
  while ((await cluster(nodes.c)).nodes.find((x) => x.name === 'b').drained) {
    if (Date.now() - t0 > 3000) throw new Error('b still drained after 3 s');
    await sleep(100);
  }
  const m = opsctl('b', 'cluster', 'move', 'points', 'b');
  assertEq(m.status, 0, `move the points unit to b (${m.stdout} ${m.stderr})`);
  await waitOwner(nodes.c, 'points', ['b'], 2000, 'the points unit after the move');
  const w = await http(nodes.c, 'PUT', '/api/v1/points/ext-1', { value: 5.5 });
  assertEq(w.status, 200, `a write on c made by b (${w.text})`);
}, { timeout: 20000 });

const san = work.sanitizerReport();
if (san) failTest('cluster move: no sanitizer report', san);
await finish();

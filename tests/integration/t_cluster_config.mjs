// One configuration for the cluster: opsctl cluster config push against three real NATS
// servers and three opsd nodes (docs/cluster.md, "One configuration for the cluster"). A
// valid push is applied by every node like a reload (a new point everywhere, the same
// configuration hash on every node); an invalid one (a bad point, a section that is not
// shared, broken YAML) is refused by the node it reached and changes nothing; a file that
// does not apply, written straight into the bucket, leaves every node running what it had and
// saying config_mismatch; the next valid push clears it. Skips only when nats-server is not
// installed.
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test, finish, assert, assertEq, sleep, failTest } from './lib/harness.mjs';
import { http } from './lib/opsd.mjs';
import { publishRaw } from './lib/nats_cluster.mjs';
import { setup, cluster, waitOwner } from './lib/cluster.mjs';

const env = await setup('t_cluster_config');
const { work, nats, nodes } = env;
const all = ['a', 'b', 'c'];

const shared = (points) => `drivers:
  - type: simulator
    name: sim1
    nodes: [a, b, c]
    points:
      - {name: "cl-{01..20}", type: double, pattern: sine, period: 200ms, min: 0, max: 100, resolution: 0.01}
points:
  - {name: "ext-1", type: double, writable: true}
  - {name: "cl-sum", expression: "{cl-01} + {cl-02}"}
${points}
`;

function push(node, text) {
  const f = join(work.dir, `push-${Date.now()}.yaml`);
  writeFileSync(f, text);
  return spawnSync(process.env.OPSCTL, ['--url', nodes[node].url, 'cluster', 'config', 'push', f],
    { encoding: 'utf8', timeout: 15000 });
}

async function waitPoint(n, name, ms, what) {
  const t0 = Date.now();
  for (;;) {
    const r = await http(nodes[n], 'GET', `/api/v1/points/${name}`);
    if (r.status === 200) return r.json;
    if (Date.now() - t0 > ms) throw new Error(`${what}: ${name} on ${n}: ${r.text}`);
    await sleep(100);
  }
}

await test('cluster config: three nodes; a owns sim1', async () => {
  for (const n of all) await env.start(n);
  await waitOwner(nodes.c, 'sim1', ['a'], 10000, 'sim1');
  await sleep(1500); // every node hears the others
}, { timeout: 30000 });

let rev = 0;
await test('cluster config: a valid push on c is applied by every node; every node has the same hash', async () => {
  const r = push('c', shared('  - {name: "ext-2", type: int, writable: true}'));
  assertEq(r.status, 0, `opsctl exit status (${r.stdout} ${r.stderr})`);
  assert(/stored at revision \d+/.test(r.stdout), r.stdout);
  for (const n of all) await waitPoint(n, 'ext-2', 5000, 'after the push');
  const t0 = Date.now();
  for (;;) {
    const views = await Promise.all(all.map((n) => cluster(nodes[n])));
    const hashes = new Set(views.map((v) => v.nodes.find((x) => x.self).config));
    const applied = views.map((v) => v.shared_config.applied);
    if (hashes.size === 1 && applied.every((x) => x > 0 && x === applied[0])) {
      rev = applied[0];
      assert(views.every((v) => v.nodes.every((x) => x.config_mismatch === false)), 'no config_mismatch');
      break;
    }
    if (Date.now() - t0 > 5000) throw new Error(`hashes ${[...hashes]}, applied ${applied}`);
    await sleep(200);
  }
  const w = await http(nodes.b, 'PUT', '/api/v1/points/ext-2', { value: 7 });
  assertEq(w.status, 200, `a write to the pushed point on b (${w.text})`);
  assert(/reloaded .* with the cluster's configuration/.test(nodes.b.log()), 'b logs the reload');
  await waitOwner(nodes.c, 'sim1', ['a'], 1000, 'sim1 kept its owner');
}, { timeout: 30000 });

await test('cluster config: invalid pushes are refused where they arrive and change nothing', async () => {
  const bad = [
    [shared('  - {name: "ext-3", type: nope}'), /cluster configuration:\d+: .*type/],
    [`server:\n  listen: 127.0.0.1:1\n${shared('')}`, /server/],
    [shared('  - {name: "ext-3", type: double').replace('points:', 'points: ['), /cluster configuration/],
    [shared('  - {name: "cl-01", type: double}'), /declared twice/],
  ];
  for (const [text, re] of bad) {
    const r = await http(nodes.b, 'PUT', '/api/v1/cluster/config', text);
    assertEq(r.status, 400, `status (${r.text})`);
    assertEq(r.json.error.code, 'invalid_config', 'code');
    assert(re.test(r.json.error.message), `message ${r.json.error.message} does not match ${re}`);
  }
  const o = push('a', shared('  - {name: "ext-3", type: nope}'));
  assertEq(o.status, 1, 'opsctl exit status for an invalid file');
  assert(/invalid_config/.test(o.stderr), o.stderr);
  await sleep(1000);
  for (const n of all) {
    const c = await cluster(nodes[n]);
    assertEq(c.shared_config.revision, rev, `revision on ${n}`);
    assertEq((await http(nodes[n], 'GET', '/api/v1/points/ext-3')).status, 404, `ext-3 on ${n}`);
  }
}, { timeout: 30000 });

await test('cluster config: a file that does not apply, put into the bucket directly: every node keeps its configuration and says config_mismatch', async () => {
  const text = Buffer.from(shared('  - {name: "ext-9", type: nope}'));
  await publishRaw(nats.urls[0], '$KV.OPSD_ITEST_OWNERS.config.shared', [text]);
  const t0 = Date.now();
  for (;;) {
    const c = await cluster(nodes.c);
    if (c.nodes.filter((x) => x.config_mismatch).length === 3) break;
    if (Date.now() - t0 > 5000) throw new Error(`config_mismatch after 5 s: ${JSON.stringify(c.nodes.map((x) => [x.name, x.config_mismatch]))}`);
    await sleep(200);
  }
  for (const n of all) {
    await waitPoint(n, 'ext-2', 100, 'the running configuration');
    assert(/config_mismatch, this node takes no lease/.test(nodes[n].log()), `node ${n} logs the mismatch`);
  }
  // No node can take sim1 from a: a keeps it (data acquisition goes on).
  await waitOwner(nodes.b, 'sim1', ['a'], 1000, 'sim1');
}, { timeout: 20000 });

await test('cluster config: the next valid push clears config_mismatch everywhere', async () => {
  const r = push('a', shared('  - {name: "ext-2", type: int, writable: true}\n  - {name: "ext-4", type: bool, writable: true}'));
  assertEq(r.status, 0, `opsctl exit status (${r.stdout} ${r.stderr})`);
  for (const n of all) await waitPoint(n, 'ext-4', 5000, 'after the push');
  const t0 = Date.now();
  for (;;) {
    const c = await cluster(nodes.b);
    if (c.nodes.every((x) => !x.config_mismatch)) break;
    if (Date.now() - t0 > 5000) throw new Error('config_mismatch not cleared');
    await sleep(200);
  }
}, { timeout: 20000 });

const san = work.sanitizerReport();
if (san) failTest('cluster config: no sanitizer report', san);
await finish();

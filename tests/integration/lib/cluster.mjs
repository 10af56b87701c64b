// Shared by the cluster tests (t_cluster.mjs, t_cluster_faults.mjs): three NATS servers with
// JetStream, opsd nodes with a cluster: section around a simulator driver, and waits bounded
// by a time with a message that says what was expected. docs/cluster.md.
import { writeFileSync } from 'node:fs';
import { sleep, assertEq, failTest, pass, finish } from './harness.mjs';
import { workDir, startOpsd, http } from './opsd.mjs';
import { natsServerPath, startNatsCluster } from './nats_cluster.mjs';

export const LEASE_MS = 5000; // the default: it outlasts a JetStream leader election (docs/cluster.md)

// setup(name, {candidates, isolated: {node: 'keep'}, drivers: 'more driver entries'}) ->
// {work, nats, nodes, start(node),
// rewrite(extra)}; skips the
// file (one "ok" line) when nats-server is not installed, fails it when NATS does not start.
export async function setup(name, { candidates = ['a', 'b', 'c'], isolated = {}, drivers = '' } = {}) {
  if (!natsServerPath()) {
    pass(`${name}: skipped: nats-server is not installed (scripts/deps.sh test installs it)`);
    await finish();
  }
  const work = workDir(name);
  let nats;
  try {
    nats = await startNatsCluster(work, 3);
  } catch (e) {
    failTest(`${name}: three nats-server with JetStream start`, e.message);
    work.keep = true;
    await finish();
  }
  const config = (node, extra) => (port, dataDir) => `server:
  listen: 127.0.0.1:${port}
  data_dir: ${dataDir}
cluster:
  name: itest
  node: ${node}
  servers: [${nats.urls.join(', ')}]
  lease: ${LEASE_MS}ms
  isolated: ${isolated[node] || 'stop'}
drivers:
  - type: simulator
    name: sim1
    nodes: [${candidates.join(', ')}]
    points:
      - {name: "cl-{01..20}", type: double, pattern: sine, period: 200ms, min: 0, max: 100, resolution: 0.01}
${extra}
${drivers}
points:
  - {name: "ext-1", type: double, writable: true}
  - {name: "cl-sum", expression: "{cl-01} + {cl-02}"}
`;
  const env = { work, nats, nodes: {}, extra: '' };
  env.start = async (node) => {
    env.nodes[node] = await startOpsd(work, { config: config(node, env.extra), tag: node });
    return env.nodes[node];
  };
  // Every running node gets the same extra point lines (nodes must share their points).
  env.rewrite = (extra) => {
    env.extra = extra;
    for (const [node, d] of Object.entries(env.nodes)) {
      if (!d.exitInfo) writeFileSync(d.configPath, config(node, extra)(d.port, d.dataDir));
    }
  };
  return env;
}

export async function cluster(d) {
  const r = await http(d, 'GET', '/api/v1/cluster');
  assertEq(r.status, 200, `GET /api/v1/cluster status (${r.text.slice(0, 200)})`);
  return r.json;
}

// Polls until the unit has an owner in `want` on node d; returns [owner, ms waited].
export async function waitOwner(d, unit, want, ms, what) {
  const t0 = Date.now();
  let last = null;
  while (Date.now() - t0 < ms) {
    try {
      const c = await cluster(d);
      const u = c.units.find((x) => x.name === unit);
      last = u ? u.owner : 'no such unit';
      if (u && want.includes(u.owner)) return [u.owner, Date.now() - t0];
    } catch { /* node busy or gone */ }
    await sleep(100);
  }
  throw new Error(`${what}: unit ${unit} owner is ${JSON.stringify(last)} after ${ms} ms, wanted one of ${want}`);
}

// Waits until point `name` on node d is good with a source time after `since`.
export async function waitFresh(d, name, since, ms, what) {
  const t0 = Date.now();
  let last = '';
  while (Date.now() - t0 < ms) {
    const r = await http(d, 'GET', `/api/v1/points/${name}`).catch((e) => ({ text: e.message }));
    last = r.text;
    if (r.json && r.json.quality === 'good' && r.json.ts >= since) return r.json;
    await sleep(100);
  }
  throw new Error(`${what}: ${name} is not fresh after ${ms} ms: ${last}`);
}

// Waits until point `name` on node d is good with the given value.
export async function waitValue(d, name, value, ms, what) {
  const t0 = Date.now();
  for (;;) {
    const r = await http(d, 'GET', `/api/v1/points/${name}`);
    if (r.json.value === value && r.json.quality === 'good') return;
    if (Date.now() - t0 > ms) throw new Error(`${what}: ${name} is ${r.text}, wanted ${value}`);
    await sleep(100);
  }
}

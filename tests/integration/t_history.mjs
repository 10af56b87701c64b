// History: samples recorded from the simulator and from POST /api/v1/samples, durable before
// they are acknowledged (kill -9 while posting, restart, every acknowledged sample is there),
// backfill, raw paging, aggregates, CSV, bad queries. docs/API.md "History".
import { join } from 'node:path';
import { test, finish, assert, assertEq, sleep, failTest } from './lib/harness.mjs';
import { workDir, startOpsd, http, diag } from './lib/opsd.mjs';

const work = workDir('t_history');
const dataDir = join(work.dir, 'data');
const config = (port) => `
server: {listen: 127.0.0.1:${port}, data_dir: ${dataDir}}
drivers:
  - type: simulator
    name: plant
    points:
      - {name: "tank1-{0000..0099}", type: double, pattern: sine, period: 200ms, resolution: 0.01}
points:
  - {name: "ext-{000..009}", type: double, writable: true}
  - {name: "flag", type: bool, writable: true}
  - {name: "label", type: string, writable: true}
  - {name: "not-recorded", type: double, writable: true}
history:
  retention: 10m
  partition: 1m
  commit_interval: 500ms
  record:
    - {match: "tank1-*", mode: on_change}
    - {match: "ext-*", mode: on_change}
    - {match: "flag", mode: on_change}
    - {match: "label", mode: on_change}
`;

let d;
try {
  d = await startOpsd(work, { config });
} catch (e) {
  failTest('history: opsd starts', e.message);
  work.keep = true;
  await finish();
}

const post = (dd, samples) => http(dd, 'POST', '/api/v1/samples', { samples });
const hist = (dd, q) => http(dd, 'GET', `/api/v1/history?${q}`);

await test('history: simulator points are recorded and queryable', async () => {
  await sleep(1500);
  const r = await hist(d, `points=tank1-0001,tank1-0002&from=${Date.now() - 60000}`);
  assertEq(r.status, 200, `status (${r.text.slice(0, 200)})`);
  assertEq(r.json.series.length, 2, 'series');
  assertEq(r.json.series[0].point, 'tank1-0001', 'point');
  const s = r.json.series[0].samples;
  assert(s.length >= 4, `samples after 1.5 s at 200 ms: ${s.length}`);
  for (const x of s) {
    assert(Array.isArray(x) && x.length === 3 && Number.isInteger(x[0]) && typeof x[1] === 'number' && x[2] === 'good',
      `sample shape ${JSON.stringify(x)}`);
  }
  for (let i = 1; i < s.length; i++) assert(s[i][0] > s[i - 1][0], 'samples in time order');
});

await test('history: from and to read a time back from now as opsctl does (-1m, now-1m, now)', async () => {
  const t0 = Date.now();
  for (const q of ['from=-1m', 'from=now-1m&to=now', 'from=-60s&to=-0s', 'from=-60000ms']) {
    const r = await hist(d, `points=tank1-0001&${q}`);
    assertEq(r.status, 200, `${q}: ${r.text.slice(0, 200)}`);
    const s = r.json.series[0].samples;
    assert(s.length >= 4, `${q}: samples ${s.length}`);
    assert(s[0][0] >= t0 - 61000 && s[0][0] <= Date.now() + 1000, `${q}: first sample at ${s[0][0]} (now ${t0})`);
  }
  // "-5" has no unit: ms since the epoch as before (5 ms before 1970), not five seconds ago.
  const r = await hist(d, 'points=tank1-0001&from=-5&to=0');
  assertEq(r.status, 200, r.text.slice(0, 200));
  assertEq(r.json.series[0].samples.length, 0, 'nothing before 1970');
});

// Every acknowledged sample survives kill -9.
const acked = new Map(); // point -> Set(ts)
let base = Date.now() - 500000;
// Three kills: the later ones land while the store commits a checkpoint in the background
// (commit_interval 500ms), so replay sees WAL segments from before the last carry.
await test('history: kill -9 while samples are posted; every acknowledged sample is there after restart', async () => {
  for (let cycle = 0; cycle < 3; cycle++) {
  let stop = false;
  let inflight = 0;
  const poster = async (k) => {
    while (!stop) {
      const ts0 = base;
      base += 10;
      const samples = [];
      for (let p = 0; p < 10; p++) {
        for (let j = 0; j < 10; j++) samples.push({ point: `ext-00${p}`, ts: ts0 + j, value: k * 1000 + j + p / 10 });
      }
      inflight++;
      const r = await post(d, samples).catch(() => null);
      inflight--;
      if (r && r.status === 200) {
        for (const s of samples) {
          if (!acked.has(s.point)) acked.set(s.point, new Set());
          acked.get(s.point).add(s.ts);
        }
      }
    }
  };
  const posters = [0, 1, 2, 3].map(poster);
  await sleep(1200 + cycle * 350);
  const r = await d.stop('SIGKILL', 5000);
  stop = true;
  await Promise.all(posters);
  assertEq(r.signal, 'SIGKILL', 'killed');
  const total = [...acked.values()].reduce((a, s) => a + s.size, 0);
  diag(`acknowledged ${total} samples before kill -9 number ${cycle + 1}`);
  assert(total >= 1000 * (cycle + 1), `too few samples acknowledged before the kill (${total})`);
  d = await startOpsd(work, { config });
  }
  for (const [point, tss] of acked) {
    const got = new Set();
    let cursor = '';
    for (let page = 0; page < 100; page++) {
      const q = await hist(d, `points=${point}&from=0&to=${Date.now()}&limit=100000${cursor ? `&cursor=${cursor}` : ''}`);
      assertEq(q.status, 200, `query ${point}`);
      for (const x of q.json.series[0].samples) got.add(x[0]);
      if (!q.json.next) break;
      cursor = q.json.next;
    }
    const missing = [...tss].filter((t) => !got.has(t));
    assertEq(missing.length, 0, `${point}: acknowledged samples missing after restart (first: ${missing.slice(0, 3)})`);
  }
}, { timeout: 60000 });

await test('history: a sample is not stored twice after restarts (replay)', async () => {
  for (const point of acked.keys()) {
    const q = await hist(d, `points=${point}&from=0&to=${Date.now()}&limit=1000000`);
    const ts = q.json.series[0].samples.map((x) => x[0]);
    assertEq(new Set(ts).size, ts.length, `${point}: distinct timestamps`);
  }
});

await test('history: backfill goes to history without moving the current value back', async () => {
  const now = Date.now();
  let r = await post(d, [{ point: 'ext-009', ts: now, value: 99 }]);
  assertEq(r.status, 200, 'post current');
  r = await post(d, [{ point: 'ext-009', ts: now - 3600000, value: -5 }]);
  assertEq(r.status, 200, 'post old');
  const p = await http(d, 'GET', '/api/v1/points/ext-009');
  assertEq(p.json.value, 99, 'current value');
  const q = await hist(d, `points=ext-009&from=${now - 3600001}&to=${now - 3599999}`);
  assertEq(JSON.stringify(q.json.series[0].samples), JSON.stringify([[now - 3600000, -5, 'good']]), 'backfilled sample');
});

await test('history: bool and string points', async () => {
  const now = Date.now();
  await post(d, [{ point: 'flag', ts: now - 2, value: true }, { point: 'label', ts: now - 2, value: 'a "b"' }]);
  await post(d, [{ point: 'flag', ts: now - 1, value: false }, { point: 'label', ts: now - 1, value: 'c' }]);
  const q = await hist(d, `points=flag,label&from=${now - 10}&to=${now}`);
  assertEq(JSON.stringify(q.json.series[0].samples.map((x) => x[1])), '[true,false]', 'flag');
  assertEq(JSON.stringify(q.json.series[1].samples.map((x) => x[1])), '["a \\"b\\"","c"]', 'label');
});

await test('history: aggregates per interval and per bucket', async () => {
  const t0 = Math.floor(Date.now() / 60000) * 60000 - 600000;
  const samples = [];
  for (let i = 0; i < 60; i++) samples.push({ point: 'ext-008', ts: t0 + i * 1000, value: i });
  assertEq((await post(d, samples)).status, 200, 'post');
  let q = await hist(d, `points=ext-008&from=${t0}&to=${t0 + 59999}&interval=10s&agg=avg,min,max,count`);
  assertEq(q.status, 200, `status ${q.text.slice(0, 200)}`);
  const b = q.json.series[0].buckets;
  assertEq(b.length, 6, 'buckets of 10 s');
  assertEq(JSON.stringify(b[0]), JSON.stringify([t0, { avg: 4.5, min: 0, max: 9, count: 10 }]), 'first bucket');
  q = await hist(d, `points=ext-008&from=${t0}&to=${t0 + 59999}&buckets=2`);
  assertEq(q.json.series[0].buckets.length, 2, 'two buckets');
  assertEq(q.json.series[0].buckets[1][1].max, 59, 'max of the second');
});

await test('history: columnar batches for bulk loads; a bad one changes nothing', async () => {
  const t0 = Date.now() - 7200000;
  const ts = Array.from({ length: 1000 }, (_, i) => t0 + i);
  const values = ts.map((_, i) => i / 4);
  let r = await http(d, 'POST', '/api/v1/samples', { series: [{ point: 'ext-006', ts, values }] });
  assertEq(r.status, 200, `status ${r.text.slice(0, 200)}`);
  assertEq(r.json.accepted, 1000, 'accepted');
  r = await http(d, 'POST', '/api/v1/samples', { series: [{ point: 'ext-006', ts: [t0 - 1, t0 - 2], values: [1, 'x'] }] });
  assertEq(r.status, 400, 'wrong type');
  assertEq(r.json.error.code, 'wrong_type', 'code');
  const q = await hist(d, `points=ext-006&from=${t0 - 10}&to=${t0 + 999}&limit=100000`);
  assertEq(q.json.series[0].samples.length, 1000, 'samples stored (and none of the bad batch)');
  assertEq(q.json.series[0].samples[999][1], 999 / 4, 'last value');
});

await test('history: InfluxDB line protocol at /write and /api/v2/write', async () => {
  const t = Date.now() - 1000;
  const body = `ext-005 value=4.5 ${t - 10}000000\n# a comment\n\next-005 value=5.5 ${t - 9}000000\n`;
  let r = await fetch(`${d.url}/write`, { method: 'POST', body });
  assertEq(r.status, 204, 'v1 write');
  r = await fetch(`${d.url}/api/v2/write?precision=ms`, { method: 'POST', body: `label value="x,y" ${t}\n` });
  assertEq(r.status, 204, 'v2 write');
  const q = await hist(d, `points=ext-005&from=${t - 10}&to=${t - 9}`);
  assertEq(JSON.stringify(q.json.series[0].samples), JSON.stringify([[t - 10, 4.5, 'good'], [t - 9, 5.5, 'good']]), 'v1 samples');
  r = await fetch(`${d.url}/write`, { method: 'POST', body: `ext-005 value=1.5 ${t}000000\nnope value=1\n` });
  assertEq(r.status, 400, 'unknown point');
  const e = await r.json();
  assert(/line 2: no point named 'nope'/.test(e.message), `message: ${e.message}`);
  const q2 = await hist(d, `points=ext-005,label&from=${t}&to=${t + 1}`);
  assertEq(q2.json.series[0].samples.length, 0, 'the bad batch changed nothing');
  assertEq(JSON.stringify(q2.json.series[1].samples), JSON.stringify([[t, 'x,y', 'good']]), 'string via v2');
  r = await fetch(`${d.url}/write?precision=ms`, { method: 'POST', body: `ext-005 value=2.5 ${t}\n` });
  assertEq(r.status, 204, 'precision=ms');
  const q3 = await hist(d, `points=ext-005&from=${t}&to=${t}`);
  assertEq(JSON.stringify(q3.json.series[0].samples), JSON.stringify([[t, 2.5, 'good']]), 'stored');
});

await test('history: CSV export', async () => {
  const now = Date.now();
  await post(d, [{ point: 'ext-007', ts: now - 5, value: 1.5 }, { point: 'ext-007', ts: now - 4, value: 2.5 }]);
  const r = await hist(d, `points=ext-007&from=${now - 5}&to=${now - 4}&format=csv`);
  assertEq(r.status, 200, 'status');
  assertEq(r.text, `point,ts,value,quality\next-007,${now - 5},1.5,good\next-007,${now - 4},2.5,good\n`, 'csv');
});

await test('history: bad queries get 400 and a reason', async () => {
  for (const q of ['', 'points=ext-000&from=x', 'points=ext-000&from=-5x', 'points=ext-000&from=-m',
    'points=ext-000&from=now-', 'points=ext-000&from=-1m&to=-2m', 'points=ext-000&from=--5m', 'points=ext-000&interval=1m&buckets=4',
    'points=ext-000&agg=avg', 'points=ext-000&interval=1m&agg=median', 'points=a%20b',
    'points=ext-000&from=0&to=9999999999999&interval=1ms']) {
    const r = await hist(d, q);
    assertEq(r.status, 400, `GET /api/v1/history?${q}`);
    assert(r.json && r.json.error && r.json.error.message, `error body for ${q}`);
  }
});

await test('history: a point without a recording rule has no samples', async () => {
  await post(d, [{ point: 'not-recorded', value: 1 }]);
  const r = await hist(d, 'points=not-recorded');
  assertEq(JSON.stringify(r.json.series[0].samples), '[]', 'samples');
});

// A sample older than the retention is acknowledged (it is durable in the WAL), but its
// chunk is not stored: retention already dropped its partition, which must not come back.
await test('history: a sample past the retention is counted as expired, its partition not recreated', async () => {
  const metric = async () => {
    const m = await http(d, 'GET', '/metrics');
    const x = /\nopsd_history_chunks_expired_total (\d+)/.exec(m.text);
    assert(x, '/metrics has opsd_history_chunks_expired_total');
    return Number(x[1]);
  };
  const before = await metric();
  const old = Date.now() - 30 * 60000;
  const r = await post(d, [{ point: 'ext-009', ts: old, value: 7 }]);
  assertEq(r.status, 200, `POST (${r.text.slice(0, 200)})`);
  // Counted when the committer refuses the chunk; the chunk leaves memory once that commit
  // is done, so a query may still see it for a moment.
  const inMemory = async () => {
    const h = await hist(d, `points=ext-009&from=${old - 1000}&to=${old + 1000}`);
    return h.json.series[0].samples.length;
  };
  let after = before;
  let seen = 1;
  for (let i = 0; i < 50 && (after === before || seen); i++) {
    await sleep(200);
    after = await metric();
    seen = await inMemory();
  }
  assert(after > before, `opsd_history_chunks_expired_total went from ${before} to ${after}`);
  const p = await http(d, 'GET', '/api/v1/history/partitions');
  assertEq(p.status, 200, 'partitions');
  const start = old - (old % 60000);
  assert(!p.json.partitions.some((x) => x.start <= old && old < x.end),
    `no partition holds ${old} (partition ${start}): ${JSON.stringify(p.json.partitions.map((x) => x.start))}`);
  assertEq(seen, 0, 'samples at that time, in memory or stored');
});

await test('history: metrics and status show the recorder', async () => {
  const m = await http(d, 'GET', '/metrics');
  for (const k of ['opsd_history_durable_total', 'opsd_history_buffer_samples', 'opsd_history_partitions'])
    assert(m.text.includes(`\n${k} `), `/metrics has ${k}`);
  const s = await http(d, 'GET', '/api/v1/status');
  assert(s.json.history && s.json.history.series > 0, 'status.history.series');
});

await test('history: SIGTERM exits 0 and no sanitizer report', async () => {
  const r = await d.stop('SIGTERM', 10000);
  assertEq([r.code, r.signal, r.killed], [0, null, false], 'exit');
  const rep = work.sanitizerReport();
  assert(!rep, `sanitizer: ${rep}`);
});

await finish();

// Calculated points against the real daemon: inputs posted through POST /api/v1/samples, the
// calculated values read over REST and over the WebSocket stream (same frame as the inputs'
// change), time and quality from the inputs, bad with a reason (no value, division by zero),
// writes refused (PUT, POST samples, line protocol) with nothing changed, history recording a
// calculated point, a reload that changes, adds and removes calculated points without
// touching the others, and invalid configurations (cycle, unknown input, writable) refused by
// --check-config and by a reload with the running set kept. docs/internals/calc.md.
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test, finish, assert, assertEq, sleep, failTest } from './lib/harness.mjs';
import { workDir, startOpsd, standardConfig, http, Client } from './lib/opsd.mjs';

const work = workDir('t_calc');
const dataDir = join(work.dir, 'data');
const calcPoints = `  - {name: total, expression: "{ext-000} + {ext-001}", unit: bar}
  - {name: total2, expression: "total * 2"}
  - {name: "scaled-{0..1}", expression: "{ext-00$1} * 10"}
  - {name: high, type: bool, expression: "total > 10"}
  - {name: ratio, expression: "{ext-000} / {ext-001}"}
  - {name: rounded, type: int, expression: "total / 3"}
history:
  retention: 10m
  partition: 1m
  commit_interval: 200ms
  record:
    - {match: "total", mode: on_change}
`;
const config = (port) => standardConfig({ port, dataDir, pointsExtra: calcPoints });

let d;
try {
  d = await startOpsd(work, { config });
} catch (e) {
  failTest('calc: opsd starts', e.message);
  await finish();
}

const post = (samples) => http(d, 'POST', '/api/v1/samples', { samples });
const point = async (name) => {
  const r = await http(d, 'GET', `/api/v1/points/${name}`);
  assertEq(r.status, 200, `GET ${name} (${r.text.slice(0, 200)})`);
  return r.json;
};
const reloads = async () => (await http(d, 'GET', '/api/v1/status')).json.reloads;
// Rewrites the config (a visible change) and waits until the daemon counted the reload.
const reload = async (text, which) => {
  const before = await reloads();
  await sleep(1100);
  writeFileSync(d.configPath, text);
  const deadline = Date.now() + 8000;
  for (;;) {
    const now = await reloads();
    if (now[which] > before[which]) return;
    assert(Date.now() < deadline, `no ${which} reload counted within 8 s: ${JSON.stringify(now)}`);
    await sleep(100);
  }
};

const ws = await Client.connect(d.wsUrl).catch((e) => {
  failTest('calc: WebSocket connects', e.message);
  return null;
});
if (!ws) await finish();

await test('calc: before any input has a value the calculated point is bad with the reason', async () => {
  const p = await point('total');
  assertEq(p.quality, 'bad', 'quality');
  assertEq(p.value, null, 'no value');
  assert(/input 'ext-00[01]' has no value/.test(p.reason), `reason: ${p.reason}`);
  assertEq(p.expression, '{ext-000} + {ext-001}', 'the expression is shown');
  assertEq(p.writable, false, 'not writable');
  assertEq(p.unit, 'bar', 'metadata as declared');
});

const t0 = Date.now() - 5000;
await test('calc: posted inputs give the value, the newest input time and good quality', async () => {
  ws.send({ op: 'subscribe', id: 's1', points: ['total', 'total2', 'ext-000'], interval: '100ms' });
  await ws.update('s1');
  const r = await post([{ point: 'ext-000', ts: t0, value: 3 }, { point: 'ext-001', ts: t0 + 7, value: 4.5 }]);
  assertEq(r.status, 200, `POST samples (${r.text})`);
  const p = await point('total');
  assertEq([p.value, p.ts, p.quality], [7.5, t0 + 7, 'good'], 'total');
  assertEq((await point('total2')).value, 15, 'a calculated point reading a calculated point');
  assertEq((await point('scaled-0')).value, 30, 'pattern with $1');
  assertEq((await point('scaled-1')).value, 45, 'pattern with $1');
  assertEq((await point('high')).value, false, 'bool');
  assertEq((await point('rounded')).value, 3, 'int rounds to nearest (2.5 -> 3)');
  assertEq((await point('ratio')).value, 3 / 4.5, 'ratio');
});

await test('calc: the stream sends a calculated change in the same frame as its input', async () => {
  ws.take(() => true);
  const r = await post([{ point: 'ext-000', ts: t0 + 10, value: 5 }]);
  assertEq(r.status, 200, 'POST');
  const m = await ws.next((x) => x.op === 'update' && x.id === 's1' && x.values.some((v) => v[0] === 'ext-000' && v[1] === 5),
    5000, 'the update with ext-000 = 5');
  const byName = Object.fromEntries(m.values.map((v) => [v[0], v]));
  assertEq(byName.total && byName.total.slice(0, 4), ['total', 9.5, t0 + 10, 'good'], 'total in the same frame');
  assertEq(byName.total2 && byName.total2[1], 19, 'total2 in the same frame');
});

await test('calc: quality follows the worst input, and a NaN result is bad with a reason', async () => {
  let r = await post([{ point: 'ext-001', ts: t0 + 20, value: 0, quality: 'uncertain' }]);
  assertEq(r.status, 200, 'POST');
  const p = await point('total');
  assertEq([p.value, p.quality, p.reason], [5, 'uncertain', "input 'ext-001' is uncertain"], 'uncertain input');
  const q = await point('ratio');
  assertEq(q.quality, 'bad', 'division by zero');
  assert(/division by zero/.test(q.reason), `reason: ${q.reason}`);
  r = await post([{ point: 'ext-001', ts: t0 + 21, value: 2 }]);
  assertEq((await point('ratio')).quality, 'good', 'good again');
  assertEq((await point('total')).quality, 'good', 'good again');
});

await test('calc: writes to a calculated point are refused with a clear error and change nothing', async () => {
  const before = await point('total');
  let r = await http(d, 'PUT', '/api/v1/points/total', { value: 1 });
  assertEq(r.status, 409, `PUT (${r.text})`);
  assertEq(r.json.error.code, 'not_writable', 'code');
  assert(/calculated from its expression/.test(r.json.error.message), `message: ${r.json.error.message}`);
  r = await post([{ point: 'ext-002', value: 1 }, { point: 'total', value: 1 }]);
  assertEq(r.status, 409, `POST samples (${r.text})`);
  assertEq(r.json.error.index, 1, 'the index of the refused sample');
  assert(/samples\[1\]: point 'total' is calculated/.test(r.json.error.message), `message: ${r.json.error.message}`);
  assertEq((await point('ext-002')).value, null, 'the batch changed nothing');
  r = await http(d, 'POST', '/api/v1/samples', { series: [{ point: 'total2', ts: [Date.now()], values: [1] }] });
  assertEq(r.status, 409, `series form (${r.text})`);
  const lp = await fetch(`${d.url}/write`, { method: 'POST', body: 'total value=1\n' });
  assertEq(lp.status, 400, 'line protocol');
  assert(/line 1: point 'total' is calculated/.test(await lp.text()), 'line protocol message');
  const after = await point('total');
  assertEq([after.value, after.ts], [before.value, before.ts], 'unchanged');
});

await test('calc: history records a calculated point like any point', async () => {
  const t = Date.now() - 1000;
  await post([{ point: 'ext-000', ts: t, value: 100 }]);
  await post([{ point: 'ext-000', ts: t + 1, value: 101 }]);
  const q = await http(d, 'GET', `/api/v1/history?points=total&from=${t}&to=${t + 1}`);
  assertEq(q.status, 200, 'history query');
  assertEq(q.json.series[0].samples, [[t, 102, 'good'], [t + 1, 103, 'good']], 'total recorded');
});

const original = readFileSync(d.configPath, 'utf8');
await test('calc: a reload changes, adds and removes calculated points and re-evaluates at once', async () => {
  ws.send({ op: 'subscribe', id: 's2', points: ['total', 'ext-001'], interval: '100ms' });
  await ws.update('s2');
  const text = original
    .replace('expression: "{ext-000} + {ext-001}"', 'expression: "{ext-000} - {ext-001}"')
    .replace('  - {name: high, type: bool, expression: "total > 10"}\n',
      '  - {name: diff-abs, expression: "abs(total)"}\n');
  await reload(text, 'ok');
  // ext-000 = 101, ext-001 = 2: the new expression without any new sample.
  const p = await point('total');
  assertEq([p.value, p.expression], [99, '{ext-000} - {ext-001}'], 'changed expression');
  const m = await ws.next((x) => x.op === 'update' && x.id === 's2' && x.values.some((v) => v[0] === 'total' && v[1] === 99),
    5000, 'the stream sees the re-evaluated value');
  assert(m, 'update');
  assertEq((await point('total2')).value, 198, 'total2 (unchanged) follows');
  assertEq((await point('diff-abs')).value, 99, 'added');
  assertEq((await http(d, 'GET', '/api/v1/points/high')).status, 404, 'removed');
  assertEq((await point('ext-001')).value, 2, 'inputs kept their values');
  await post([{ point: 'ext-001', value: 1 }]);
  assertEq((await point('total')).value, 100, 'evaluated on new samples');
});

const running = () => readFileSync(d.configPath, 'utf8');
await test('calc: invalid configurations are refused with the error, and nothing changes', async () => {
  const good = running();
  const cases = [
    [good.replace('expression: "total * 2"', 'expression: "{diff-abs} + 1"')
      .replace('expression: "abs(total)"', 'expression: "abs(total2)"'),
    /points\[\d+\]: calculated points read each other in a cycle: (total2 -> diff-abs -> total2|diff-abs -> total2 -> diff-abs)/],
    [good.replace('expression: "total * 2"', 'expression: "total * nosuch"'),
      /calculated point 'total2': the expression reads 'nosuch', which is not a declared point/],
    [good.replace('{name: total2, expression', '{name: total2, writable: true, expression'),
      /calculated point 'total2' cannot be writable/],
    [good.replace('expression: "total * 2"', 'expression: "total * (2"'),
      /calculated point 'total2': expression error at \d+: expected '\)'/],
  ];
  for (const [text, want] of cases) {
    const bad = join(work.dir, 'bad.yaml');
    writeFileSync(bad, text);
    const c = spawnSync(process.env.OPSD, ['--check-config', bad], { encoding: 'utf8', timeout: 20000 });
    assertEq(c.status, 1, `--check-config exit status (${c.stdout}${c.stderr})`);
    assert(want.test(c.stderr), `--check-config: ${want} in ${c.stderr}`);
  }
  const before = await point('total2');
  await reload(cases[0][0], 'failed');
  assert(/reload refused: .*calculated points read each other in a cycle/.test(d.log()), 'the log names the cycle');
  const after = await point('total2');
  assertEq([after.value, after.expression], [before.value, 'total * 2'], 'total2 unchanged');
  await post([{ point: 'ext-001', value: 0.5 }]);
  assertEq((await point('total2')).value, 2 * 100.5, 'the running set is still evaluated');
  assertEq((await point('diff-abs')).expression, 'abs(total)', 'diff-abs unchanged');
}, { timeout: 40000 });

await test('calc: status and metrics count the calculated points and their evaluations', async () => {
  const st = (await http(d, 'GET', '/api/v1/status')).json.calculated;
  assertEq([st.points, st.levels], [7, 2], 'status: 7 calculated points after the reload, 2 levels (total2 reads total)');
  assert(st.evaluations > 10, `evaluations: ${st.evaluations}`);
  const m = await http(d, 'GET', '/metrics');
  assert(/^opsd_calc_points 7$/m.test(m.text), 'opsd_calc_points');
  const ev = +(m.text.match(/^opsd_calc_evaluations_total (\d+)$/m) || [])[1];
  assert(ev >= st.evaluations, `opsd_calc_evaluations_total ${ev}`);
});

ws.close();
await finish();

// Registry: NCMP inventory registration against the real daemon and the test DMI plugin
// (lib/registry_dmi.mjs): partial failures report exactly the bad handles with NCMP's codes,
// ADVISED -> READY, module set tags fetched once (single flight) and shared modules once,
// read side and searches, a failing and a hanging plugin lock the handle and retry recovers
// it, upgrade, removal, restart and kill -9 during a sync. docs/API.md "Network devices".
import { join } from 'node:path';
import { test, finish, assert, assertEq, sleep, failTest } from './lib/harness.mjs';
import { workDir, startOpsd, http, metrics, diag, Client } from './lib/opsd.mjs';
import { startDmi } from './lib/registry_dmi.mjs';

const work = workDir('t_registry');
const dataDir = join(work.dir, 'data');
const config = (port) => `
server: {listen: 127.0.0.1:${port}, data_dir: ${dataDir}}
registry:
  sync_batch: 20
  sync_concurrency: 3
  retry_initial: 300ms
  retry_max: 1s
  plugin_timeout: 700ms
  max_batch: 1000
`;

const dmi = await startDmi({ delayMs: 5 });
let d;
try {
  d = await startOpsd(work, { config });
} catch (e) {
  failTest('registry: opsd starts', e.message);
  work.keep = true;
  await dmi.close();
  await finish();
}

const reg = (body) => http(d, 'POST', '/ncmpInventory/v1/ch', body);
const ch = (id, what = '') => http(d, 'GET', `/ncmp/v1/ch/${encodeURIComponent(id)}${what}`);
const idSearch = (conds, q = '') => http(d, 'POST', `/ncmp/v1/ch/id-searches${q}`, { cmHandleQueryParameters: conds });
const created = (ids, extra = () => ({})) => ids.map((id, i) => ({ cmHandle: id, ...extra(id, i) }));
const range = (p, n, from = 0) => Array.from({ length: n }, (_, i) => `${p}${String(i + from).padStart(3, '0')}`);

async function waitState(ids, state, ms = 15000) {
  const deadline = Date.now() + ms;
  let last;
  for (;;) {
    const r = await idSearch([{ conditionName: 'cmHandleWithCpsPath', conditionParameters: [{ cpsPath: `//state[@cm-handle-state='${state}']` }] }]);
    const have = new Set(r.json);
    last = ids.filter((id) => !have.has(id));
    if (last.length === 0) return;
    if (Date.now() > deadline) throw new Error(`${last.length} handles not ${state} within ${ms} ms, e.g. ${last.slice(0, 3)}`);
    await sleep(100);
  }
}

const A = range('a-', 120), B = range('b-', 80);

await test('registry: a batch with bad handles answers 500 with exactly those, the rest apply', async () => {
  const r = await reg({
    dmiPlugin: dmi.url,
    createdCmHandles: [
      { cmHandle: 'ok-1', alternateId: 'alt/ok-1', moduleSetTag: 'tagX', publicCmHandleProperties: { color: 'red' } },
      { cmHandle: 'bad id' },
      { cmHandle: 'bad/id' },
      { cmHandle: 'ok-2', alternateId: 'alt/ok-1' },
      { cmHandle: 'dup' }, { cmHandle: 'dup' },
    ],
    removedCmHandles: ['ghost-1'],
    updatedCmHandles: [{ cmHandle: 'ghost-2', publicCmHandleProperties: { a: 'b' } }],
    upgradedCmHandles: { cmHandles: ['ok-1', 'ghost-3'], moduleSetTag: 'tagY' },
  });
  assertEq(r.status, 500, `status (${r.text.slice(0, 300)})`);
  const codes = (l) => (r.json[l] || []).map((x) => `${x.cmHandle}:${x.errorCode}`).sort().join(',');
  // an alternate id already taken is 109, as in NCMP master's CmHandleCreateSpec
  assertEq(codes('failedCreatedCmHandles'), 'bad id:110,bad/id:110,dup:109,ok-2:109', 'created failures');
  assertEq(codes('failedRemovedCmHandles'), 'ghost-1:100', 'removed failures');
  assertEq(codes('failedUpdatedCmHandles'), 'ghost-2:100', 'updated failures');
  // ok-1 was just created: ADVISED, so its upgrade is refused as not ready (101)
  assertEq(codes('failedUpgradeCmHandles'), 'ghost-3:100,ok-1:101', 'upgrade failures');
  for (const e of r.json.failedCreatedCmHandles) assert(typeof e.errorText === 'string' && e.errorText, 'errorText');
  assertEq((await ch('ok-1')).status, 200, 'ok-1 exists');
  assertEq((await ch('dup')).status, 200, 'dup exists once');
  assertEq((await ch('ok-2')).status, 404, 'ok-2 not created');
});

await test('registry: bad bodies are 400/413 and change nothing', async () => {
  const before = (await http(d, 'GET', `/ncmpInventory/v1/ch/cmHandles?dmi-plugin-identifier=${encodeURIComponent(dmi.url)}`)).json.length;
  for (const body of ['{', '[]', '{"createdCmHandles":[{"cmHandle":"x1"}]}',
    `{"dmiPlugin":"${dmi.url}","createdCmHandles":[{"cmHandle":7}]}`,
    `{"dmiPlugin":"${dmi.url}","createdCmHandles":[{"cmHandle":"x2","publicCmHandleProperties":{"a":{}}}]}`,
    `{"dmiPlugin":"${dmi.url}","createdCmHandles":[{"cmHandle":"x3","trustLevel":"MAYBE"}]}`]) {
    const r = await reg(body);
    assertEq(r.status, 400, `status for ${body} (${r.text.slice(0, 200)})`);
    // NCMP's ErrorMessage: {status, message, details}
    assert(r.json && r.json.status === '400 BAD_REQUEST' && r.json.message && r.json.details, `error body ${r.text}`);
  }
  const big = await reg({ dmiPlugin: dmi.url, createdCmHandles: created(range('big-', 1001)) });
  assertEq(big.status, 413, 'oversized batch');
  const after = (await http(d, 'GET', `/ncmpInventory/v1/ch/cmHandles?dmi-plugin-identifier=${encodeURIComponent(dmi.url)}`)).json.length;
  assertEq(after, before, 'handles unchanged');
});

await test('registry: 200 handles, 2 tags: all READY, each tag fetched once, shared modules once', async () => {
  // the first batch's syncs store the shared modules: let them finish before counting fetches
  await waitState(['ok-1', 'dup'], 'READY');
  dmi.reset();
  const r = await reg({
    dmiPlugin: dmi.url,
    createdCmHandles: [
      ...created(A, (id, i) => ({ moduleSetTag: 'tagA', publicCmHandleProperties: { site: i % 2 ? 'north' : 'south' }, alternateId: `alt-${id}` })),
      ...created(B, () => ({ moduleSetTag: 'tagB', cmHandleProperties: { secret: 'x' } })),
    ],
  });
  assertEq(r.status, 200, `status (${r.text.slice(0, 300)})`);
  assertEq(r.text, '', 'empty body');
  await waitState([...A, ...B], 'READY');
  assertEq(dmi.stats.byTag.tagA, 1, `tagA module fetches (${JSON.stringify(dmi.stats.byTag)})`);
  assertEq(dmi.stats.byTag.tagB, 1, 'tagB module fetches');
  // the shared modules came with the first batch's handles: stored, so not fetched again
  assertEq(dmi.stats.served['ietf-yang-types'], undefined, `shared module not fetched again (${JSON.stringify(dmi.stats.served)})`);
  assertEq(dmi.stats.served['tagA-module-1'], 1, 'a new module fetched once');
  const st = await http(d, 'GET', '/api/v1/status');
  assert(st.json.registry.module_sets >= 2, 'module sets');
});

await test('registry: untagged devices syncing at once fetch each new module once (single flight per module)', async () => {
  // untagged handles get the module named after their id's last character: Q, W and K are
  // new here; 60 handles spread over the 3 sync threads, every batch wanting all three
  const ids = Array.from({ length: 60 }, (_, i) => `sf-${String(i).padStart(2, '0')}${'QKW'[i % 3]}`);
  dmi.reset();
  const r = await reg({ dmiPlugin: dmi.url, createdCmHandles: created(ids) });
  assertEq(r.status, 200, `status (${r.text.slice(0, 300)})`);
  await waitState(ids, 'READY');
  assertEq(dmi.stats.modules, 60, 'one module list per untagged handle');
  for (const m of ['untagged-Q', 'untagged-K', 'untagged-W']) {
    assertEq(dmi.stats.served[m], 1, `${m} fetched once (${JSON.stringify(dmi.stats.served)})`);
  }
  const mods = await ch(ids[0], '/modules');
  assert(mods.json.some((m) => m.moduleName === 'untagged-Q'), `modules of ${ids[0]}: ${mods.text}`);
  const m = await metrics(d);
  assert(m.get('opsd_registry_modules_shared_total') > 0, 'sources shared between syncs');
});

await test('registry: read side shapes (handle, state, modules)', async () => {
  const r = await ch(A[1]);
  assertEq(r.status, 200, 'status');
  assertEq(r.json.cmHandle, A[1], 'cmHandle');
  assertEq(JSON.stringify(r.json.publicCmHandleProperties), '[{"site":"north"}]', 'public properties');
  assertEq(r.json.state.cmHandleState, 'READY', 'state');
  assert(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+0000$/.test(r.json.state.lastUpdateTime), `lastUpdateTime ${r.json.state.lastUpdateTime}`);
  assertEq(r.json.moduleSetTag, 'tagA', 'tag');
  assertEq(r.json.alternateId, `alt-${A[1]}`, 'alternate id');
  const byAlt = await ch(`alt-${A[1]}`);
  assertEq(byAlt.json && byAlt.json.cmHandle, A[1], 'found by its alternate id');
  const b = await ch(B[0]);
  assert(!b.text.includes('secret'), 'private properties stay private');
  const s = await ch(A[1], '/state');
  assertEq(s.json.state.cmHandleState, 'READY', '/state');
  const m = await ch(A[1], '/modules');
  assertEq(m.json.length, 5, 'modules');
  assert(m.json.some((x) => x.moduleName === 'tagA-module-1' && x.revision === '2024-01-01' && x.namespace === 'urn:test:tagA:1'), 'module shape');
  assertEq((await ch('nope')).status, 404, 'unknown handle');
  assertEq((await ch(A[1], '/bogus')).status, 404, 'unknown sub-path');
});

await test('registry: searches by module, public property and state, AND-ed; alternate ids', async () => {
  let r = await idSearch([{ conditionName: 'hasAllModules', conditionParameters: [{ moduleName: 'tagB-module-2' }] }]);
  assertEq(r.status, 200, 'status');
  assertEq(r.json.sort().join(), B.join(), 'by module');
  r = await idSearch([{ conditionName: 'hasAllModules', conditionParameters: [{ moduleName: 'ietf-yang-types' }, { moduleName: 'tagA-module-3' }] },
    { conditionName: 'hasAllProperties', conditionParameters: [{ site: 'north' }] }]);
  assertEq(r.json.length, 60, 'module AND property');
  r = await idSearch([{ conditionName: 'hasAllProperties', conditionParameters: [{ site: 'north' }] }], '?outputAlternateId=true');
  assert(r.json.every((x) => x.startsWith('alt-a-')), 'alternate ids');
  r = await http(d, 'POST', '/ncmp/v1/ch/searches', { cmHandleQueryParameters: [{ conditionName: 'hasAllProperties', conditionParameters: [{ site: 'south' }] }] });
  assertEq(r.json.length, 60, 'full search');
  assertEq(r.json[0].state.cmHandleState, 'READY', 'full objects');
  r = await idSearch([{ conditionName: 'hasAllModules', conditionParameters: [{ moduleName: 'no-such' }] }]);
  assertEq(r.json.length, 0, 'unknown module');
  r = await idSearch([{ conditionName: 'nonsense', conditionParameters: [{}] }]);
  assertEq(r.status, 400, 'unknown condition');
  r = await http(d, 'POST', '/ncmp/v1/ch/id-searches', '{"cmHandleQueryParameters":');
  assertEq(r.status, 400, 'malformed');
  r = await http(d, 'GET', `/ncmpInventory/v1/ch/cmHandles?dmi-plugin-identifier=${encodeURIComponent(dmi.url)}`);
  assert(r.json.length >= 202, `by plugin: ${r.json.length}`);
});

await test('registry: separate data and model plugins: modules come from the model plugin', async () => {
  let r = await reg({ dmiDataPlugin: 'http://127.0.0.1:9', dmiModelPlugin: dmi.url, createdCmHandles: created(['dm-1'], () => ({ moduleSetTag: 'tagA' })) });
  assertEq(r.status, 200, `status (${r.text.slice(0, 200)})`);
  r = await reg({ dmiDataPlugin: 'http://127.0.0.1:9', dmiModelPlugin: dmi.url, createdCmHandles: created(['dm-2'], () => ({ moduleSetTag: 'tagDM' })) });
  assertEq(r.status, 200, 'status');
  await waitState(['dm-1', 'dm-2'], 'READY');
  r = await http(d, 'GET', '/ncmpInventory/v1/ch/cmHandles?dmi-plugin-identifier=http%3A%2F%2F127.0.0.1%3A9');
  assertEq(JSON.stringify(r.json.sort()), '["dm-1","dm-2"]', 'by data plugin');
  r = await reg({ dmiPlugin: dmi.url, dmiDataPlugin: dmi.url, createdCmHandles: created(['dm-3']) });
  assertEq(r.status, 400, 'dmiPlugin with dmiDataPlugin');
  r = await reg({ dmiDataPlugin: dmi.url, createdCmHandles: created(['dm-3']) });
  assertEq(r.status, 400, 'dmiDataPlugin alone');
});

await test('registry: a failing plugin locks the handle (reason, attempts) and retry recovers it', async () => {
  dmi.fault({ status: 500, idPattern: /^f-/ });
  const ids = range('f-', 5);
  const r = await reg({ dmiPlugin: dmi.url, createdCmHandles: created(ids, () => ({ moduleSetTag: 'tagF' })) });
  assertEq(r.status, 200, 'status');
  await waitState(ids, 'LOCKED');
  const s = await ch(ids[0], '/state');
  assertEq(s.json.state.lockReason.reason, 'MODULE_SYNC_FAILED', 'reason');
  assert(/^ Attempt #\d+ failed: /.test(s.json.state.lockReason.details) && /HTTP 500/.test(s.json.state.lockReason.details),
    `details ${s.json.state.lockReason.details}`);
  await sleep(800);
  const s2 = await ch(ids[0], '/state');
  assert(/Attempt #([2-9]|\d\d) failed/.test(s2.json.state.lockReason.details), `retried: ${s2.json.state.lockReason.details}`);
  dmi.fault({});
  await waitState(ids, 'READY', 8000);
});

await test('registry: a plugin that does not answer times out, locks, then recovers', async () => {
  dmi.fault({ hang: true, idPattern: /^slow-/ });
  // untagged: one fetch each; after the first timeout the batch's others are not sent to wait
  // for the same plugin (8 x 700 ms one after the other would take 5.6 s)
  const ids = range('slow-', 8);
  await reg({ dmiPlugin: dmi.url, createdCmHandles: created(ids) });
  await waitState(ids, 'LOCKED', 3000);
  const s = await ch(ids[0], '/state');
  assert(/time/i.test(s.json.state.lockReason.details), `details ${s.json.state.lockReason.details}`);
  dmi.fault({});
  await waitState(ids, 'READY', 8000);
});

await test('registry: upgrade re-points handles to another tag; removal drops unused sets', async () => {
  const setsBefore = (await http(d, 'GET', '/api/v1/status')).json.registry.module_sets;
  let r = await reg({ dmiPlugin: dmi.url, upgradedCmHandles: { cmHandles: B.slice(0, 10), moduleSetTag: 'tagC' } });
  assertEq(r.status, 200, `upgrade (${r.text.slice(0, 200)})`);
  await waitState(B.slice(0, 10), 'READY');
  const h = await ch(B[0]);
  assertEq(h.json.moduleSetTag, 'tagC', 'new tag');
  const m = await ch(B[0], '/modules');
  assert(m.json.some((x) => x.moduleName === 'tagC-module-1'), 'new modules');
  r = await reg({ dmiPlugin: dmi.url, removedCmHandles: B });
  assertEq(r.status, 200, 'remove');
  assertEq((await ch(B[5])).status, 404, 'removed');
  const st = (await http(d, 'GET', '/api/v1/status')).json.registry;
  assertEq(st.module_sets, setsBefore - 1, 'tagB and tagC sets gone, tagA and the rest stay (+tagC -tagB -tagC)');
  r = await idSearch([{ conditionName: 'hasAllModules', conditionParameters: [{ moduleName: 'tagB-module-1' }] }]);
  assertEq(r.json.length, 0, 'nothing has tagB modules');
});

await test('registry: lifecycle events on the stream (filter by prefix and state)', async () => {
  const c = await Client.connect(d.wsUrl);
  c.send({ op: 'subscribe', id: 'd1', devices: { prefix: 'w-' } });
  c.send({ op: 'subscribe', id: 'd2', devices: { prefix: 'w-', states: ['DELETED'] } });
  await c.next((m) => m.op === 'subscribed' && m.id === 'd1', 3000, 'subscribed d1');
  await c.next((m) => m.op === 'subscribed' && m.id === 'd2', 3000, 'subscribed d2');
  c.send({ op: 'subscribe', id: 'd3', devices: { states: ['SLEEPY'] } });
  await c.next((m) => m.op === 'error' && m.id === 'd3', 3000, 'error for a bad state');
  const ids = ['w-1', 'w-2', 'w-3'];
  await reg({ dmiPlugin: dmi.url, createdCmHandles: created(ids, () => ({ moduleSetTag: 'tagA' })) });
  await waitState(ids, 'READY');
  await reg({ dmiPlugin: dmi.url, removedCmHandles: ids });
  const seen = {};
  const deleted = new Set();
  const deadline = Date.now() + 5000;
  while ((Object.values(seen).filter((v) => v.includes('DELETED')).length < 3 || deleted.size < 3) && Date.now() < deadline) {
    const m = await c.next((x) => x.op === 'devices', deadline - Date.now(), 'device events');
    for (const e of m.events) {
      assert(e.cmHandle.startsWith('w-'), `filtered by prefix: ${e.cmHandle}`);
      if (m.id === 'd1') (seen[e.cmHandle] = seen[e.cmHandle] || []).push(e.state);
      if (m.id === 'd2') { assertEq(e.state, 'DELETED', 'd2 gets DELETED only'); deleted.add(e.cmHandle); }
    }
  }
  for (const id of ids) assertEq((seen[id] || []).join(','), 'ADVISED,READY,DELETING,DELETED', `events of ${id}`);
  assertEq(deleted.size, 3, 'd2 events');
  c.send({ op: 'unsubscribe', id: 'd1' });
  await c.next((m) => m.op === 'unsubscribed' && m.id === 'd1', 3000, 'unsubscribed');
  c.ws.close();
});

await test('registry: restart keeps every handle, state and module', async () => {
  const before = (await http(d, 'GET', '/api/v1/status')).json.registry;
  await d.stop('SIGTERM');
  d = await startOpsd(work, { config });
  const after = (await http(d, 'GET', '/api/v1/status')).json.registry;
  assertEq(after.cm_handles, before.cm_handles, 'handles');
  assertEq(after.ready, before.ready, 'ready');
  assertEq(after.module_sets, before.module_sets, 'sets');
  assertEq(after.modules, before.modules, 'modules');
  const r = await ch(A[7]);
  assertEq(r.json.state.cmHandleState, 'READY', 'state kept');
  assertEq(r.json.alternateId, `alt-${A[7]}`, 'alternate id kept');
});

await test('registry: kill -9 during a sync, restart: every handle ends READY', async () => {
  dmi.fault({ delayMs: 150 });
  const ids = range('k-', 150);
  const r = await reg({ dmiPlugin: dmi.url, createdCmHandles: created(ids) }); // untagged: one fetch each
  assertEq(r.status, 200, 'registered (durable)');
  await sleep(300);
  await d.stop('SIGKILL');
  dmi.fault({});
  d = await startOpsd(work, { config });
  await waitState(ids, 'READY', 20000);
  const st = (await http(d, 'GET', '/api/v1/status')).json.registry;
  diag(`after kill -9: ${JSON.stringify(st)}`);
});

await test('registry: metrics', async () => {
  const m = await metrics(d);
  assert(m.get('opsd_registry_cm_handles{state="READY"}') > 0, 'ready gauge');
  assert(m.has('opsd_registry_modules'), 'modules gauge');
  assert(m.has('opsd_registry_plugin_requests_total'), 'plugin requests');
});

await test('registry: SIGTERM exits 0 and no sanitizer report', async () => {
  const r = await d.stop('SIGTERM', 10000);
  assertEq(JSON.stringify([r.code, r.signal, r.killed]), JSON.stringify([0, null, false]), 'exit');
  const rep = work.sanitizerReport();
  assert(!rep, `sanitizer: ${rep}`);
});

await dmi.close();
await finish();

// NCMP conformance of the registry, checked with ONAP CPS-NCMP's own request bodies (its K6
// registration payload and the cases of its integration tests, onap/cps master) against the
// real daemon and the test DMI plugin (lib/registry_dmi.mjs): alternate id conflicts (109),
// numbers as property values, references sent with %2F, the read side (modules, module
// definitions, properties, state with dataSyncState), NCMP's error bodies and lock reason
// wording, cps path conditions, trust levels, and the inventory's searches with the role each
// route needs. docs/API.md "Network devices".
import { join } from 'node:path';
import { test, finish, assert, assertEq, sleep, failTest } from './lib/harness.mjs';
import { workDir, startOpsd, http, Client } from './lib/opsd.mjs';
import { startDmi } from './lib/registry_dmi.mjs';

const work = workDir('t_ncmp');
const dataDir = join(work.dir, 'data');
const config = (port) => `
server:
  listen: 127.0.0.1:${port}
  data_dir: ${dataDir}
  auth:
    tokens:
      - {name: viewer1, token: v-tok, role: viewer}
      - {name: ops, token: o-tok, role: operator}
registry:
  sync_batch: 50
  sync_concurrency: 2
  retry_initial: 300ms
  retry_max: 1s
  plugin_timeout: 700ms
  data_timeout: 800ms
  data_concurrency: 8
  health_interval: 300ms
`;

const dmi = await startDmi({ delayMs: 2 });
let d;
try {
  d = await startOpsd(work, { config });
} catch (e) {
  failTest('ncmp: opsd starts', e.message);
  await dmi.close();
  await finish();
}

const H = (tok) => ({ Authorization: `Bearer ${tok}` });
const as = (method, path, body, tok = 'o-tok') => http(d, method, path, body, H(tok));
const reg = (body) => as('POST', '/ncmpInventory/v1/ch', body);
const ch = (ref, what = '') => as('GET', `/ncmp/v1/ch/${encodeURIComponent(ref)}${what}`, undefined, 'v-tok');
const cond = (conditionName, conditionParameters) => ({ conditionName, conditionParameters });
const idSearch = (conds, q = '') => as('POST', `/ncmp/v1/ch/id-searches${q}`, { cmHandleQueryParameters: conds }, 'v-tok');
const cps = (cpsPath, q = '') => idSearch([cond('cmHandleWithCpsPath', [{ cpsPath }])], q);
const sorted = (r) => JSON.stringify([...(r.json || [])].sort());
const codes = (r, l) => ((r.json && r.json[l]) || []).map((x) => `${x.cmHandle}:${x.errorCode}`).sort().join(',');

// ONAP K6 (k6-tests/ncmp/common/cmhandle-crud.js, utils.js getAlternateId, onap/cps master)
const MODULE_SET_TAGS = ['tagA', 'tagB', 'tagC', 'tagD', 'tagE'];
const getAlternateId = (n) => `/SubNetwork=Europe/SubNetwork=Ireland/MeContext=MyRadioNode${n}/ManagedElement=MyManagedElement${n}`;
function createCmHandlePayload(cmHandleIds) {
  return {
    dmiPlugin: dmi.url,
    createdCmHandles: cmHandleIds.map((cmHandleId, index) => {
      const networkSegmentId = (index % 10) + 1;
      const moduleTag = MODULE_SET_TAGS[index % MODULE_SET_TAGS.length];
      return {
        cmHandle: cmHandleId,
        alternateId: getAlternateId(cmHandleId.replace('ch-', '')),
        moduleSetTag: moduleTag,
        dataProducerIdentifier: 'some-data-producer-id',
        cmHandleProperties: {
          segmentId: index + 1,
          networkSegment: `Region=NorthAmerica,Segment=${networkSegmentId}`,
          deviceIdentifier: `Element=RadioBaseStation_5G_${index + 1000}`,
          hardwareVersion: `HW-${moduleTag}`,
          softwareVersion: `Firmware_${moduleTag}`,
          syncStatus: 'ACTIVE',
          nodeCategory: 'VirtualNode',
        },
        publicCmHandleProperties: { systemId: index + 1, systemName: 'ncmp' },
      };
    }),
  };
}
const K6 = Array.from({ length: 50 }, (_, i) => `ch-${i + 1}`);

async function waitReady(ids, ms = 15000) {
  const deadline = Date.now() + ms;
  for (;;) {
    // K6's own query for READY handles (double quotes inside the cps path)
    const r = await cps('//state[@cm-handle-state="READY"]');
    const have = new Set(r.json);
    const missing = ids.filter((id) => !have.has(id));
    if (!missing.length) return;
    if (Date.now() > deadline) throw new Error(`${missing.length} not READY, e.g. ${missing.slice(0, 3)}`);
    await sleep(100);
  }
}

await test('ncmp: ONAP K6 registration payload (numbers as property values) is accepted and syncs', async () => {
  const r = await reg(createCmHandlePayload(K6));
  assertEq(r.status, 200, `status (${r.text.slice(0, 300)})`);
  await waitReady(K6);
  const h = await ch('ch-3');
  assertEq(JSON.stringify(h.json.publicCmHandleProperties), '[{"systemId":"3","systemName":"ncmp"}]', 'numbers as text');
  assertEq(h.json.dataProducerIdentifier, 'some-data-producer-id', 'producer');
  assertEq(h.json.state.dataSyncEnabled, false, 'dataSyncEnabled');
  assertEq(JSON.stringify(h.json.state.dataSyncState), '{"operational":{"syncState":"NONE_REQUESTED"}}', 'dataSyncState');
  assert(!h.text.includes('RadioBaseStation'), 'private properties stay private');
});

await test('ncmp: an alternate id with "/" sent percent-encoded (%2F) names its handle', async () => {
  const alt = getAlternateId(7);
  const r = await ch(alt);
  assertEq(r.status, 200, `status (${r.text.slice(0, 200)})`);
  assertEq(r.json.cmHandle, 'ch-7', 'handle');
  assertEq(r.json.alternateId, alt, 'alternate id');
  const p = await ch(alt, '/properties');
  assertEq(p.text, '{"publicCmHandleProperties":[{"systemId":"7","systemName":"ncmp"}]}', '/properties');
  const s = await ch(alt, '/state');
  assertEq(s.json.state.cmHandleState, 'READY', '/state');
  const m = await ch(alt, '/modules');
  assertEq(m.json.length, 5, `/modules ${m.text.slice(0, 200)}`);
  const ids = await cps(`//cm-handles[@alternate-id='${alt}']`);
  assertEq(sorted(ids), '["ch-7"]', 'cps path on the alternate id');
  const alts = await cps(`//cm-handles[@alternate-id='${alt}']`, '?outputAlternateId=true');
  assertEq(sorted(alts), JSON.stringify([alt]), 'outputAlternateId');
});

await test('ncmp: alternate id conflicts answer 109 (CmHandleCreateSpec, CmHandleUpdateSpec)', async () => {
  let r = await reg({ dmiPlugin: dmi.url, createdCmHandles: [{ cmHandle: 'alt-1', alternateId: 'existing-alt-id' }, { cmHandle: 'alt-2' }] });
  assertEq(r.status, 200, 'setup');
  r = await reg({
    dmiPlugin: dmi.url,
    createdCmHandles: [
      { cmHandle: 'alt-3' },
      { cmHandle: 'alt-4', alternateId: 'unique-alt-id' },
      { cmHandle: 'alt-5', alternateId: 'existing-alt-id' },
      { cmHandle: 'alt-6', alternateId: 'duplicate-alt-id' },
      { cmHandle: 'alt-7', alternateId: 'duplicate-alt-id' },
    ],
  });
  assertEq(r.status, 500, 'partial failure');
  assertEq(codes(r, 'failedCreatedCmHandles'), 'alt-5:109,alt-7:109', 'created');
  assertEq(r.json.failedCreatedCmHandles[0].errorText, 'cm-handle already exists', 'error text');
  // update: blank or the same keeps it, a different one is refused and the old one stays
  for (const a of ['', '  ', 'existing-alt-id']) {
    r = await reg({ dmiPlugin: dmi.url, updatedCmHandles: [{ cmHandle: 'alt-1', alternateId: a }] });
    assertEq(r.status, 200, `update with '${a}'`);
  }
  r = await reg({ dmiPlugin: dmi.url, updatedCmHandles: [{ cmHandle: 'alt-1', alternateId: 'new' }] });
  assertEq(codes(r, 'failedUpdatedCmHandles'), 'alt-1:109', 'changed alternate id');
  assertEq((await ch('alt-1')).json.alternateId, 'existing-alt-id', 'kept');
  r = await reg({ dmiPlugin: dmi.url, updatedCmHandles: [{ cmHandle: 'alt-2', alternateId: 'new' }] });
  assertEq(r.status, 200, 'a first alternate id on update');
  assertEq((await ch('new')).json.cmHandle, 'alt-2', 'found by it');
});

await test('ncmp: modules and module definitions (plain, by module, by module and revision)', async () => {
  let r = await ch('no-such-handle', '/modules');
  assertEq(`${r.status} ${r.text}`, '200 []', 'modules of an unknown handle');
  r = await ch('no-such-handle', '/modules/definitions');
  assertEq(`${r.status} ${r.text}`, '200 []', 'definitions of an unknown handle');
  r = await ch('ch-1', '/modules/definitions');
  assertEq(r.status, 200, 'status');
  assertEq(r.json.length, 5, `definitions ${r.text.slice(0, 200)}`);
  const t = r.json.find((x) => x.moduleName === 'tagA-module-1');
  assert(t && t.revision === '2024-01-01' && /^module tagA-module-1 \{/.test(t.content), `shape ${JSON.stringify(t)}`);
  r = await ch('ch-1', '/modules/definitions?module-name=ietf-yang-types');
  assertEq(r.json.map((x) => x.moduleName).join(), 'ietf-yang-types', 'by module name');
  r = await ch('ch-1', '/modules/definitions?module-name=ietf-yang-types&revision=2013-07-15');
  assertEq(r.json.length, 1, 'by module and revision');
  r = await ch('ch-1', '/modules/definitions?module-name=ietf-yang-types&revision=1999-01-01');
  assertEq(r.text, '[]', 'other revision');
  r = await ch('ch-1', '/modules/definitions?revision=1999-01-01');
  assertEq(r.json.length, 5, 'a revision alone is ignored');
});

await test('ncmp: error bodies are {status, message, details}', async () => {
  let r = await ch('nope');
  assertEq(r.status, 404, 'status');
  assertEq(r.json.status, '404 NOT_FOUND', 'status text');
  assert(typeof r.json.message === 'string' && typeof r.json.details === 'string', r.text);
  r = await as('POST', '/ncmp/v1/ch/id-searches', '{"cmHandleQueryParameters":', 'v-tok');
  assertEq(`${r.status} ${r.json && r.json.status}`, '400 400 BAD_REQUEST', 'malformed search');
  r = await as('POST', '/ncmpInventory/v1/ch', { dmiPlugin: dmi.url }, 'v-tok');
  assertEq(`${r.status} ${r.json && r.json.status}`, '403 403 FORBIDDEN', 'registration as a viewer');
  r = await as('GET', '/api/v1/points/nope', undefined, 'v-tok');
  assert(r.json && r.json.error && r.json.error.code, 'opsd paths keep their own error shape');
});

await test('ncmp: lock reason details in NCMP wording (sync and upgrade failures)', async () => {
  dmi.fault({ status: 500, idPattern: /^lk-/ });
  let r = await reg({ dmiPlugin: dmi.url, createdCmHandles: [{ cmHandle: 'lk-1', moduleSetTag: 'tagLK' }] });
  assertEq(r.status, 200, 'registered');
  let s;
  for (let i = 0; i < 50; i++) {
    s = await ch('lk-1', '/state');
    if (s.json.state.cmHandleState === 'LOCKED') break;
    await sleep(100);
  }
  assertEq(s.json.state.lockReason.reason, 'MODULE_SYNC_FAILED', 'reason');
  assert(/^ Attempt #\d+ failed: .*HTTP 500/.test(s.json.state.lockReason.details), `details '${s.json.state.lockReason.details}'`);
  r = await cps("//lock-reason[@reason='MODULE_SYNC_FAILED']");
  assert(r.json.includes('lk-1') && !r.json.includes('ch-1'), `lock-reason path ${r.text}`);
  dmi.fault({});
  await waitReady(['lk-1']);
  // upgrade: LOCKED MODULE_UPGRADE "Upgrade to ModuleSetTag: T", then on failure MODULE_UPGRADE_FAILED
  dmi.fault({ status: 500, idPattern: /^lk-/ });
  r = await reg({ dmiPlugin: dmi.url, upgradedCmHandles: { cmHandles: ['lk-1'], moduleSetTag: 'tagUP' } });
  assertEq(r.status, 200, 'upgrade');
  for (let i = 0; i < 50; i++) {
    s = await ch('lk-1', '/state');
    if (s.json.state.lockReason && s.json.state.lockReason.reason === 'MODULE_UPGRADE_FAILED') break;
    await sleep(100);
  }
  assertEq(s.json.state.lockReason.reason, 'MODULE_UPGRADE_FAILED', 'upgrade failed');
  assert(/^Upgrade to ModuleSetTag: tagUP {2}Attempt #\d+ failed: /.test(s.json.state.lockReason.details),
    `details '${s.json.state.lockReason.details}'`);
  dmi.fault({});
  await waitReady(['lk-1']);
  assertEq((await ch('lk-1')).json.moduleSetTag, 'tagUP', 'upgraded');
});

await test('ncmp: cps path conditions over the dmi-registry model', async () => {
  const tagB = K6.filter((_, i) => i % 5 === 1);
  let r = await cps("/dmi-registry/cm-handles[@module-set-tag='tagB']");
  assertEq(sorted(r), JSON.stringify([...tagB].sort()), 'module-set-tag (absolute path)');
  r = await cps("/dmi-registry/cm-handles[@module-set-tag='tagB']/ancestor::cm-handles");
  assertEq(r.json.length, tagB.length, 'with the ancestor axis NCMP appends');
  r = await cps("//cm-handles[@id='ch-2' or @id='ch-4']");
  assertEq(sorted(r), '["ch-2","ch-4"]', 'or');
  r = await cps("//cm-handles[@module-set-tag='tagB' and @data-producer-identifier='some-data-producer-id']");
  assertEq(r.json.length, tagB.length, 'and');
  r = await cps("//public-properties[@name='systemId' and @value='12']");
  assertEq(sorted(r), '["ch-12"]', 'a public property (name and value of one entry)');
  r = await cps("//public-properties[@name='systemId' and @value='12' or @name='systemId' and @value='13']");
  assertEq(sorted(r), '["ch-12","ch-13"]', 'and binds tighter than or');
  r = await cps("//cm-handles[contains(@alternate-id,'MyRadioNode4')]");
  assertEq(sorted(r), '["ch-4","ch-40","ch-41","ch-42","ch-43","ch-44","ch-45","ch-46","ch-47","ch-48","ch-49"]', 'contains');
  r = await cps(`//cm-handles[@dmi-service-name='${dmi.url}']/state[@cm-handle-state='READY']`);
  assert(r.json.length >= K6.length, `two steps: ${r.json.length}`);
  r = await cps("//state[@data-sync-enabled='true']");
  assertEq(r.text, '[]', 'data sync is off everywhere');
  r = await cps("//datastores/operational[@sync-state='NONE_REQUESTED']");
  assert(r.json.includes('ch-1'), 'operational datastore of a READY handle');
  // private properties cannot be searched from the northbound API (NCMP: an empty answer)
  r = await cps("//additional-properties[@name='syncStatus' and @value='ACTIVE']");
  assertEq(r.text, '[]', 'additional-properties northbound');
  r = await as('POST', '/ncmpInventory/v1/ch/searches', { cmHandleQueryParameters: [cond('cmHandleWithCpsPath',
    [{ cpsPath: "//additional-properties[@name='segmentId' and @value='5']" }])] }, 'v-tok');
  assertEq(sorted(r), '["ch-5"]', 'additional-properties in the inventory search');
  for (const bad of ['//foo[@x=1]', "//cm-handles[@colour='x']", "//cm-handles[@id>'x']", 'cm-handles', "//cm-handles[@id='x'"]) {
    r = await cps(bad);
    assertEq(`${r.status} ${r.json && r.json.status}`, '400 400 BAD_REQUEST', `refused: ${bad}`);
  }
});

await test('ncmp: cmHandleWithTrustLevel and the trust level in reads', async () => {
  let r = await reg({ dmiPlugin: dmi.url, createdCmHandles: [{ cmHandle: 'tl-1', trustLevel: 'NONE', moduleSetTag: 'tagA' }, { cmHandle: 'tl-2', trustLevel: 'COMPLETE', moduleSetTag: 'tagA' }] });
  assertEq(r.status, 200, 'registered');
  r = await idSearch([cond('cmHandleWithTrustLevel', [{ trustLevel: 'NONE' }])]);
  assertEq(sorted(r), '["tl-1"]', 'NONE');
  r = await idSearch([cond('cmHandleWithTrustLevel', [{ whatever: 'COMPLETE' }]), cond('hasAllProperties', [{ systemName: 'ncmp' }])]);
  assertEq(r.json.length, K6.length, 'COMPLETE (parameter name not checked, as NCMP), AND-ed');
  assertEq((await ch('tl-1')).json.trustLevel, 'NONE', 'read');
});

await test('ncmp: the DMI plugin health watchdog sets the trust level of its handles', async () => {
  const p = await startDmi({});
  try {
    let r = await reg({ dmiPlugin: p.url, createdCmHandles: [{ cmHandle: 'hw-1', moduleSetTag: 'tagA' }, { cmHandle: 'hw-2', moduleSetTag: 'tagA', trustLevel: 'NONE' }] });
    assertEq(r.status, 200, 'registered');
    await waitReady(['hw-1', 'hw-2']);
    const trustOf = async (id) => (await ch(id)).json.trustLevel;
    const waitTrust = async (id, want) => {
      for (let i = 0; i < 50 && (await trustOf(id)) !== want; i++) await sleep(100);
      return trustOf(id);
    };
    for (let i = 0; i < 50 && !p.stats.health; i++) await sleep(100);
    assert(p.stats.health > 0, 'health checked');
    assertEq(await trustOf('hw-1'), 'COMPLETE', 'plugin up');
    p.setHealth('DOWN');
    assertEq(await waitTrust('hw-1', 'NONE'), 'NONE', 'plugin down: NONE');
    r = await idSearch([cond('cmHandleWithTrustLevel', [{ trustLevel: 'NONE' }]), cond('hasAllModules', [{ moduleName: 'tagA-module-1' }])]);
    assert(r.json.includes('hw-1') && r.json.includes('hw-2'), `search by effective trust ${r.text}`);
    p.setHealth('UP');
    assertEq(await waitTrust('hw-1', 'COMPLETE'), 'COMPLETE', 'back up');
    assertEq(await trustOf('hw-2'), 'NONE', 'a device registered NONE stays NONE');
    await reg({ dmiPlugin: p.url, removedCmHandles: ['hw-1', 'hw-2'] });
  } finally {
    await p.close();
  }
});

await test('ncmp: inventory searches, listing by plugin, and the role each route needs', async () => {
  let r = await as('POST', '/ncmpInventory/v1/ch/searches', { cmHandleQueryParameters: [
    cond('hasAllAdditionalProperties', [{ softwareVersion: 'Firmware_tagC' }]),
    cond('cmHandleWithDmiPlugin', [{ dmiPluginName: dmi.url }])] }, 'v-tok');
  assertEq(r.status, 200, `status ${r.text.slice(0, 200)}`);
  assertEq(sorted(r), JSON.stringify(K6.filter((_, i) => i % 5 === 2).sort()), 'additional properties and plugin');
  r = await as('POST', '/ncmpInventory/v1/ch/searches?outputAlternateId=true', { cmHandleQueryParameters: [
    cond('hasAllAdditionalProperties', [{ deviceIdentifier: 'Element=RadioBaseStation_5G_1000' }])] }, 'v-tok');
  assertEq(r.text, JSON.stringify([getAlternateId(1)]), 'alternate ids');
  r = await as('POST', '/ncmpInventory/v1/ch/searchCmHandles?outputDmiProperties=true', { cmHandleQueryParameters: [
    cond('cmHandleWithCpsPath', [{ cpsPath: "//cm-handles[@id='ch-1']" }])] }, 'v-tok');
  assertEq(r.status, 200, 'searchCmHandles');
  assertEq(r.json[0].cmHandle, 'ch-1', 'object');
  assertEq(r.json[0].cmHandleProperties.segmentId, '1', 'private properties when asked');
  r = await as('POST', '/ncmpInventory/v1/ch/searchCmHandles', { cmHandleQueryParameters: [] }, 'v-tok');
  assert(r.json.length >= K6.length && !r.text.includes('cmHandleProperties'), 'all, without private properties');
  r = await idSearch([cond('hasAllAdditionalProperties', [{ syncStatus: 'ACTIVE' }])]);
  assertEq(r.status, 400, 'hasAllAdditionalProperties is the inventory\'s');
  r = await as('GET', `/ncmpInventory/v1/ch/cmHandles?dmi-plugin-identifier=${encodeURIComponent(dmi.url)}&outputAlternateId=true`, undefined, 'v-tok');
  assert(r.json.includes(getAlternateId(3)) && r.json.includes('tl-1'), 'listing: alternate ids where set');
  r = await as('GET', `/ncmpInventory/v1/ch?dmi-plugin-identifier=${encodeURIComponent(dmi.url)}`, undefined, 'v-tok');
  assert(r.status === 200 && r.json.includes('ch-3'), `GET /ncmpInventory/v1/ch (${r.status})`);
  r = await http(d, 'POST', '/ncmpInventory/v1/ch/searches', { cmHandleQueryParameters: [] });
  assertEq(r.status, 401, 'no token');
});

// Data operations: ONAP K6's passthrough read and write (k6-tests/ncmp/common/passthrough-crud.js)
const RESID = 'ManagedElement=NRNode1/GNBDUFunction=1/NRCellDU=cell1';
const dataUrl = (ref, ds, q = `resourceIdentifier=${encodeURIComponent(RESID)}`) =>
  `/ncmp/v1/ch/${encodeURIComponent(ref)}/data/ds/${ds}?${q}`;
const PO = 'ncmp-datastore:passthrough-operational', PR = 'ncmp-datastore:passthrough-running';

await test('ncmp: passthrough read and writes are forwarded in the DMI API shape', async () => {
  dmi.reset();
  // K6 reads by alternate id with include-descendants
  let r = await as('GET', dataUrl(getAlternateId(4), PO, `resourceIdentifier=${encodeURIComponent(RESID)}&include-descendants=true&options=${encodeURIComponent('(fields=NRCellDU/attributes/cellLocalId)')}`), undefined, 'v-tok');
  assertEq(r.status, 200, `read (${r.text.slice(0, 300)})`);
  const st = r.json['ietf-netconf-monitoring:netconf-state'];
  assertEq(st.cmHandle, 'ch-4', 'the plugin is asked with the cm handle id');
  assertEq(st.resourceIdentifier, RESID, 'resource identifier');
  assertEq(st.options, '(fields=NRCellDU/attributes/cellLocalId)', 'options');
  assertEq(st.moduleSetTag, 'tagD', 'module set tag');
  assertEq(st.cmHandleProperties.segmentId, '4', 'private properties go to the plugin');
  const got = dmi.stats.data[0];
  assertEq(got.datastore, PO, 'datastore');
  assertEq(got.body.operation, 'read', 'operation');
  // K6's write: POST on passthrough-running -> create
  const payload = { id: '123', attributes: { userLabel: 'test' } };
  r = await as('POST', dataUrl('ch-4', PR), payload);
  assertEq(r.status, 201, `create (${r.text.slice(0, 200)})`);
  const w = dmi.stats.data[1];
  assertEq(w.body.operation, 'create', 'create');
  assertEq(JSON.parse(w.body.data).attributes.userLabel, 'test', 'data as a JSON string');
  assertEq(w.body.dataType, 'application/json', 'dataType');
  for (const [method, op, status] of [['PUT', 'update', 200], ['PATCH', 'patch', 200], ['DELETE', 'delete', 204]]) {
    r = await as(method, dataUrl('ch-4', PR), method === 'DELETE' ? undefined : payload);
    assertEq(r.status, status, `${method} (${r.text.slice(0, 200)})`);
    assertEq(dmi.stats.data[dmi.stats.data.length - 1].body.operation, op, `${method} is ${op}`);
  }
  assertEq(dmi.stats.dataOps, 5, 'five forwarded');
  // ncmp-datastore:operational: NCMP's data sync cache, which opsd does not keep: the plugin's
  // operational data, asked as passthrough-operational
  r = await as('GET', dataUrl('ch-4', 'ncmp-datastore:operational', `resourceIdentifier=${encodeURIComponent(RESID)}&include-descendants=true`), undefined, 'v-tok');
  assertEq(r.status, 200, `operational read (${r.text.slice(0, 200)})`);
  assertEq(r.json['ietf-netconf-monitoring:netconf-state'].resourceIdentifier, RESID, 'operational: resource identifier');
  assertEq(dmi.stats.data[5].datastore, PO, 'operational is read from the plugin as passthrough-operational');
  assertEq(dmi.stats.data[5].body.operation, 'read', 'a read');
});

await test('ncmp: bad data requests get NCMP\'s error and nothing is forwarded', async () => {
  dmi.reset();
  const cases = [
    ['GET', dataUrl('ch-1', 'ncmp-datastore:bogus'), undefined, 400, 'ncmp-datastore:bogus is an invalid datastore name'],
    ['GET', dataUrl('ch-1', 'ncmp-datastore:running'), undefined, 400, 'ncmp-datastore:running is an invalid datastore name'],
    ['POST', dataUrl('ch-1', PO), { a: 1 }, 400, `${PO} is not supported`],
    ['PUT', dataUrl('ch-1', 'ncmp-datastore:operational'), { a: 1 }, 400, 'ncmp-datastore:operational is not supported'],
    ['DELETE', dataUrl('ch-1', 'ncmp-datastore:operational'), undefined, 400, 'ncmp-datastore:operational is not supported'],
    ['GET', dataUrl('ch-1', PO, ''), undefined, 400],
    ['GET', dataUrl('ch-1', PO, `resourceIdentifier=${'x'.repeat(5000)}`), undefined, 400],
    ['POST', dataUrl('ch-1', PR), '{"not json', 400],
    ['PUT', dataUrl('ch-1', PR), '', 400], // Content-Length: 0 is answered at once (it waited 30 s)
    ['GET', dataUrl('no-such', PO), undefined, 404],
  ];
  for (const [method, url, body, status, message] of cases) {
    const t0 = Date.now();
    const r = await as(method, url, body);
    assert(Date.now() - t0 < 3000, `${method} answered in ${Date.now() - t0} ms`);
    assertEq(r.status, status, `${method} ${url.slice(0, 90)}: ${r.text.slice(0, 200)}`);
    assert(r.json && typeof r.json.status === 'string' && r.json.message, `NCMP error body: ${r.text.slice(0, 200)}`);
    if (message) assertEq(r.json.message, message, 'NCMP\'s message (DatastoreType, validateDataStore)');
  }
  // a handle that is not READY: NCMP's CpsException
  await reg({ dmiPlugin: 'http://127.0.0.1:9', createdCmHandles: [{ cmHandle: 'nr-1' }] });
  const r = await as('GET', dataUrl('nr-1', PO));
  assertEq(r.status, 500, 'not READY');
  assertEq(r.json.message, 'State mismatch exception.', 'message');
  assert(/^Cm-Handle not in READY state\. cm handle state is (ADVISED|LOCKED)$/.test(r.json.details), r.json.details);
  // a viewer may read but not write
  assertEq((await as('POST', dataUrl('ch-1', PR), { a: 1 }, 'v-tok')).status, 403, 'viewer write');
  assertEq((await as('DELETE', dataUrl('ch-1', PR), undefined, 'v-tok')).status, 403, 'viewer delete');
  assertEq(dmi.stats.dataOps, 0, 'nothing forwarded');
});

await test('ncmp: plugin failures: 4xx, 5xx, invalid JSON, down, slow (timeout) answer 502', async () => {
  for (const [f, code] of [[{ status: 404 }, 404], [{ status: 500 }, 500], [{ invalidJson: true }, 200], [{ hang: true }, 504]]) {
    dmi.fault({ ...f, idPattern: /^ch-9$/ });
    const t0 = Date.now();
    const r = await as('GET', dataUrl('ch-9', PO));
    assertEq(r.status, 502, `${JSON.stringify(f)}: ${r.text.slice(0, 200)}`);
    assertEq(r.json['dmi-response']['http-code'], code, `http-code for ${JSON.stringify(f)}`);
    assert(typeof r.json.message === 'string', 'message');
    if (f.hang) assert(Date.now() - t0 < 3000, 'data_timeout bounds the wait');
  }
  dmi.fault({});
  const ok = await as('GET', dataUrl('ch-9', PO));
  assertEq(ok.status, 200, 'recovers');
  // a plugin that is down: a handle whose data plugin refuses connections
  await reg({ dmiDataPlugin: 'http://127.0.0.1:9', dmiModelPlugin: dmi.url, createdCmHandles: [{ cmHandle: 'down-1', moduleSetTag: 'tagA' }] });
  await waitReady(['down-1']);
  const r = await as('GET', dataUrl('down-1', PO));
  assertEq(`${r.status} ${r.json && r.json['dmi-response'] && r.json['dmi-response']['http-code']}`, '502 503', `down: ${r.text.slice(0, 200)}`);
  const mt = await as('GET', '/metrics', undefined, 'v-tok');
  const num = (name) => Number((mt.text.match(new RegExp(`^${name} (\\d+)`, 'm')) || [])[1]);
  assert(num('opsd_registry_data_requests_total') >= 10, 'requests counted');
  assert(num('opsd_registry_data_failures_total') >= 5, 'failures counted');
  assert(num('opsd_registry_data_refused_total') >= 8, 'refusals counted');
});

await test('ncmp: 200 concurrent reads through the plugin all answer', async () => {
  dmi.reset();
  const rs = await Promise.all(Array.from({ length: 200 }, (_, i) => as('GET', dataUrl(K6[i % K6.length], PO), undefined, 'v-tok')));
  assertEq(rs.filter((r) => r.status === 200).length, 200, 'all 200');
  assert(rs.every((r, i) => r.json['ietf-netconf-monitoring:netconf-state'].cmHandle === K6[i % K6.length]), 'each its own');
  assertEq(dmi.stats.dataOps, 200, 'forwarded once each');
});

await test('ncmp: an asynchronous read (topic=) answers a request id and delivers a CloudEvent', async () => {
  const c = await Client.connect(`${d.wsUrl}?token=v-tok`);
  try {
    c.send({ op: 'subscribe', id: 't1', topic: 'my-topic' });
    await c.next((m) => m.op === 'subscribed' && m.id === 't1', 3000, 'subscribed');
    const r = await as('GET', dataUrl('ch-5', PO, `resourceIdentifier=${encodeURIComponent(RESID)}&topic=my-topic`), undefined, 'v-tok');
    assertEq(r.status, 200, `status ${r.text}`);
    assert(/^[0-9a-f-]{36}$/.test(r.json.requestId), `request id ${r.text}`);
    const m = await c.next((x) => x.op === 'event' && x.id === 't1', 5000, 'event');
    const e = m.events[0];
    assertEq(e.specversion, '1.0', 'CloudEvent');
    assertEq(e.type, 'org.onap.cps.ncmp.events.async1_0_0.DataOperationEvent', 'type');
    assertEq(e.correlationid, r.json.requestId, 'correlation id is the request id');
    assertEq(e.destination, 'my-topic', 'destination');
    const resp = e.data.responses[0];
    assertEq(JSON.stringify([resp.ids, resp.statusCode, resp.statusMessage]), '[["ch-5"],0,"Successfully applied changes"]', 'response');
    assertEq(resp.result['ietf-netconf-monitoring:netconf-state'].cmHandle, 'ch-5', 'result');
    // a failing plugin: the event carries NCMP's code
    dmi.fault({ status: 500, idPattern: /^ch-6$/ });
    await as('GET', dataUrl('ch-6', PO, `resourceIdentifier=x&topic=my-topic`), undefined, 'v-tok');
    const m2 = await c.next((x) => x.op === 'event' && x.id === 't1', 5000, 'failure event');
    assertEq(m2.events[0].data.responses[0].statusCode, 103, 'plugin failure: 103');
    dmi.fault({});
  } finally {
    c.ws.close();
  }
});

await test('ncmp: batch read of 1,000 handles over 10 plugins (POST /ncmp/v1/data?topic=)', async () => {
  const plugins = await Promise.all(Array.from({ length: 10 }, () => startDmi({ delayMs: 5 })));
  const c = await Client.connect(`${d.wsUrl}?token=v-tok`);
  try {
    const ids = [];
    for (let p = 0; p < 10; p++) {
      const mine = Array.from({ length: 100 }, (_, i) => `b${p}-${i}`);
      ids.push(...mine);
      const r = await reg({ dmiPlugin: plugins[p].url, createdCmHandles: mine.map((id) => ({ cmHandle: id, moduleSetTag: 'tagA' })) });
      assertEq(r.status, 200, 'registered');
    }
    await waitReady(ids);
    c.send({ op: 'subscribe', id: 'b', topic: 'batch-topic' });
    await c.next((m) => m.op === 'subscribed', 3000, 'subscribed');
    // NCMP's legacy batch body (k6 passthrough-crud.js legacyBatchRead), 200 targets per operation
    const operations = Array.from({ length: 5 }, (_, k) => ({
      resourceIdentifier: 'ManagedElement=NRNode1/GNBDUFunction=1', targetIds: ids.slice(k * 200, k * 200 + 200),
      datastore: PO, options: '(fields=NRCellDU/attributes/cellLocalId)', operationId: `op-${k}`, operation: 'read' }));
    operations[0].targetIds[0] = 'no-such-handle';
    const t0 = Date.now();
    const r = await as('POST', '/ncmp/v1/data?topic=batch-topic', { operations });
    assertEq(r.status, 200, `status ${r.text.slice(0, 200)}`);
    assert(/^[0-9a-f-]{36}$/.test(r.json.requestId), 'request id');
    const got = new Map();
    while (got.size < 5) {
      const m = await c.next((x) => x.op === 'event' && x.id === 'b', 20000, 'batch events');
      for (const e of m.events) {
        assertEq(e.correlationid, r.json.requestId, 'correlation id');
        got.set(e.data.responses[0].operationId, e.data.responses);
      }
    }
    const all = [...got.values()].flat();
    assertEq(all.length, 1000, 'one response per target');
    assertEq(all.filter((x) => x.statusCode === 0).length, 999, 'read');
    assertEq(all.find((x) => x.ids[0] === 'no-such-handle').statusCode, 100, 'unknown handle: 100');
    for (const p of plugins) assertEq(p.stats.dataOps, p === plugins[0] ? 99 : 100, 'each plugin gets its own handles');
    const ms = Date.now() - t0;
    assert(ms < 15000, `batch took ${ms} ms`);
    // bad batches: no topic, a write, too many targets
    assertEq((await as('POST', '/ncmp/v1/data', { operations })).status, 400, 'no topic');
    assertEq((await as('POST', '/ncmp/v1/data?topic=x', { operations: [{ ...operations[1], operation: 'create' }] })).status, 400, 'only read');
    assertEq((await as('POST', '/ncmp/v1/data?topic=x', { operations: [{ ...operations[1], targetIds: ids.slice(0, 201) }] })).status, 413, 'over 200 targets');
  } finally {
    c.ws.close();
    await Promise.all(plugins.map((p) => p.close()));
  }
});

await test('ncmp: lifecycle events in NCMP\'s LCM event format on the stream', async () => {
  const c = await Client.connect(`${d.wsUrl}?token=v-tok`);
  try {
    c.send({ op: 'subscribe', id: 'l', devices: { prefix: 'lcm-', format: 'ncmp' } });
    await c.next((m) => m.op === 'subscribed' && m.id === 'l', 3000, 'subscribed');
    await reg({ dmiPlugin: dmi.url, createdCmHandles: [{ cmHandle: 'lcm-1', alternateId: 'fdn-lcm-1', moduleSetTag: 'tagA',
      dataProducerIdentifier: 'prod1', publicCmHandleProperties: { color: 'green' } }] });
    await waitReady(['lcm-1']);
    await reg({ dmiPlugin: dmi.url, removedCmHandles: ['lcm-1'] });
    const evs = [];
    while (evs.length < 4) {
      const m = await c.next((x) => x.op === 'devices' && x.id === 'l', 5000, 'lcm events');
      evs.push(...m.events);
    }
    assertEq(evs.map((e) => e.eventType.split('.').pop()).join(), 'create,update,update,delete', 'event types');
    // the checks of NCMP's CmHandleCreateSpec
    for (const e of evs) {
      assert(/^[0-9a-f-]{36}$/.test(e.eventId), 'eventId');
      assertEq(JSON.stringify([e.eventCorrelationId, e.eventSource, e.eventSchema, e.eventSchemaVersion]),
        '["lcm-1","org.onap.ncmp","org.onap.ncmp:cmhandle-lcm-event","1.0"]', 'header fields');
    }
    assertEq(JSON.stringify([evs[0].event.alternateId, evs[0].event.moduleSetTag, evs[0].event.dataProducerIdentifier]),
      '["fdn-lcm-1","tagA","prod1"]', 'common attributes');
    assertEq(evs[0].event.oldValues, null, 'create: no old values');
    assertEq(JSON.stringify(evs[0].event.newValues), '{"cmHandleState":"ADVISED","cmHandleProperties":[{"color":"green"}]}', 'create');
    assertEq(JSON.stringify([evs[1].event.oldValues, evs[1].event.newValues]),
      '[{"cmHandleState":"ADVISED"},{"cmHandleState":"READY","dataSyncEnabled":false}]', 'ADVISED -> READY');
    assertEq(evs[2].event.newValues.cmHandleState, 'DELETING', 'deleting');
  } finally {
    c.ws.close();
  }
});

await test('ncmp: module sets of different new tags are fetched at once (bounded, once per tag)', async () => {
  // a plugin answering every request in 300 ms; 8 new tags, 20 handles each, interleaved;
  // sync_concurrency 2: in series 8 x 2 requests x 300 ms = 4.8 s, two at a time half that
  const slow = await startDmi({ delayMs: 300 });
  try {
    const tags = Array.from({ length: 8 }, (_, i) => `slowtag${i}`);
    const ids = Array.from({ length: 160 }, (_, i) => `par-${i}`);
    const t0 = Date.now();
    const r = await reg({ dmiPlugin: slow.url, createdCmHandles: ids.map((id, i) => ({ cmHandle: id, moduleSetTag: tags[i % 8] })) });
    assertEq(r.status, 200, 'registered');
    await waitReady(ids, 20000);
    const ms = Date.now() - t0;
    for (const t of tags) assertEq(slow.stats.byTag[t], 1, `${t} fetched once (${JSON.stringify(slow.stats.byTag)})`);
    // two fetches overlapped: some module list request started before an earlier one ended
    const starts = slow.stats.requests.filter((q) => q.kind === 'modules').map((q) => q.t).sort((a, b) => a - b);
    assert(starts.some((t, i) => i > 0 && t - starts[i - 1] < 150), `fetches overlap: ${starts.map((t) => t - starts[0])}`);
    assert(ms < 4000, `all READY in ${ms} ms (in series it takes 4.8 s)`);
  } finally {
    await slow.close();
  }
});

// Collects the events of subscription id on c until want(events) holds.
async function collect(c, id, want, ms = 8000, what = 'events') {
  const evs = [];
  let pos = 0;
  const deadline = Date.now() + ms;
  while (!want(evs)) {
    const m = await c.next((x) => x.op === 'devices' && x.id === id, Math.max(1, deadline - Date.now()), what);
    assertEq(m.lost, 0, `nothing lost (${what})`);
    if (m.events.length) {
      assert(m.pos > pos, `frame positions grow (${m.pos} after ${pos})`);
      pos = m.pos;
    }
    evs.push(...m.events);
  }
  return { evs, pos };
}
const key = (e) => `${e.cmHandle}:${e.state || e.trustLevel}:${e.pos}`;

await test('ncmp: lifecycle events persist: a subscriber resumes after a restart with exactly what it missed', async () => {
  let c = await Client.connect(`${d.wsUrl}?token=v-tok`);
  let seen;
  try {
    c.send({ op: 'subscribe', id: 'p', devices: { prefix: 'rs-' } });
    await c.next((m) => m.op === 'subscribed' && m.id === 'p', 3000, 'subscribed');
    await reg({ dmiPlugin: dmi.url, createdCmHandles: ['rs-1', 'rs-2', 'rs-3'].map((id) => ({ cmHandle: id, moduleSetTag: 'tagA' })) });
    await waitReady(['rs-1', 'rs-2', 'rs-3']);
    seen = await collect(c, 'p', (e) => e.filter((x) => x.state === 'READY').length === 3, 8000, 'live events');
    assertEq(seen.evs.length, 6, `ADVISED and READY of each (${seen.evs.map(key)})`);
    for (const e of seen.evs) assert(e.pos > 0 && e.pos <= seen.pos, 'every event has its position');
  } finally {
    c.ws.close();
  }
  // missed while away: two new handles, one removed; then a restart
  await reg({ dmiPlugin: dmi.url, createdCmHandles: ['rs-4', 'rs-5'].map((id) => ({ cmHandle: id, moduleSetTag: 'tagB' })) });
  await waitReady(['rs-4', 'rs-5']);
  await reg({ dmiPlugin: dmi.url, removedCmHandles: ['rs-1'] });
  await d.stop('SIGTERM', 10000);
  d = await startOpsd(work, { config });
  c = await Client.connect(`${d.wsUrl}?token=v-tok`);
  try {
    c.send({ op: 'subscribe', id: 'r', devices: { prefix: 'rs-', after: seen.pos } });
    await c.next((m) => m.op === 'subscribed' && m.id === 'r', 3000, 'subscribed');
    const missed = await collect(c, 'r', (e) => e.length >= 6, 8000, 'missed events');
    const got = missed.evs.map((e) => `${e.cmHandle}:${e.state}`);
    assertEq(JSON.stringify([...got].sort()), JSON.stringify(['rs-1:DELETED', 'rs-1:DELETING', 'rs-4:ADVISED', 'rs-4:READY',
      'rs-5:ADVISED', 'rs-5:READY']), 'exactly the missed events');
    assert(missed.evs.every((e) => e.pos > seen.pos), 'all after the position');
    assert(got.indexOf('rs-1:DELETING') + 1 === got.indexOf('rs-1:DELETED'), 'DELETING then DELETED');
    // then live events follow, no repeat and no gap
    await reg({ dmiPlugin: dmi.url, createdCmHandles: [{ cmHandle: 'rs-6', moduleSetTag: 'tagA' }] });
    await waitReady(['rs-6']);
    const live = await collect(c, 'r', (e) => e.length >= 2, 8000, 'live after the replay');
    assertEq(live.evs.map((e) => `${e.cmHandle}:${e.state}`).join(), 'rs-6:ADVISED,rs-6:READY', 'live continues');
    assert(live.evs[0].pos > missed.pos, 'positions go on');
    assertEq((await c.during(300, (m) => m.op === 'devices' && m.id === 'r')).length, 0, 'nothing more');
    // the whole history from the start, in NCMP's format: the same events, the same event ids
    c.send({ op: 'subscribe', id: 'all', devices: { prefix: 'rs-', after: 0, format: 'ncmp' } });
    const all = await collect(c, 'all', (e) => e.length >= 14, 8000, 'the whole history');
    assertEq(all.evs.length, 14, 'every event kept');
    c.send({ op: 'subscribe', id: 'all2', devices: { prefix: 'rs-', after: 0, format: 'ncmp' } });
    const all2 = await collect(c, 'all2', (e) => e.length >= 14, 8000, 'the whole history again');
    assertEq(all2.evs.map((e) => e.eventId).join(), all.evs.map((e) => e.eventId).join(), 'event ids are stable');
    assertEq(all.evs.map((e) => e.eventType.split('.').pop()).filter((t) => t === 'delete').length, 1, 'one delete');
    // bad positions are refused
    c.send({ op: 'subscribe', id: 'bad', devices: { after: -1 } });
    const e = await c.error('bad');
    assertEq(e.error.code, 'bad_request', 'negative position');
  } finally {
    c.ws.close();
  }
});

await test('ncmp: trust level changes are events (NCMP\'s AvcEvent): device trust, plugin health, removal', async () => {
  const p = await startDmi({});
  const c = await Client.connect(`${d.wsUrl}?token=v-tok`);
  try {
    c.send({ op: 'subscribe', id: 'tn', devices: { prefix: 'tr-', format: 'ncmp', trust: true } });
    c.send({ op: 'subscribe', id: 'to', devices: { prefix: 'tr-', trust: true, states: ['DELETED'] } });
    c.send({ op: 'subscribe', id: 'plain', devices: { prefix: 'tr-', states: ['DELETED'] } });
    for (const id of ['tn', 'to', 'plain']) await c.next((m) => m.op === 'subscribed' && m.id === id, 3000, 'subscribed');
    await reg({ dmiPlugin: p.url, createdCmHandles: [{ cmHandle: 'tr-1', moduleSetTag: 'tagA' }, { cmHandle: 'tr-2', moduleSetTag: 'tagA', trustLevel: 'NONE' }] });
    await waitReady(['tr-1', 'tr-2']);
    for (let i = 0; i < 50 && !p.stats.health; i++) await sleep(100);
    p.setHealth('DOWN');
    for (let i = 0; i < 50 && (await ch('tr-1')).json.trustLevel !== 'NONE'; i++) await sleep(100);
    p.setHealth('UP');
    for (let i = 0; i < 50 && (await ch('tr-1')).json.trustLevel !== 'COMPLETE'; i++) await sleep(100);
    await reg({ dmiPlugin: p.url, updatedCmHandles: [{ cmHandle: 'tr-1', trustLevel: 'NONE' }] });
    await reg({ dmiPlugin: p.url, updatedCmHandles: [{ cmHandle: 'tr-1', trustLevel: 'COMPLETE' }] });
    await reg({ dmiPlugin: p.url, removedCmHandles: ['tr-1', 'tr-2'] });
    const want = ['tr-2:-:NONE', 'tr-1:COMPLETE:NONE', 'tr-1:NONE:COMPLETE', 'tr-1:COMPLETE:NONE', 'tr-1:NONE:COMPLETE',
      'tr-1:COMPLETE:NONE'];
    const avc = (await collect(c, 'to', (e) => e.filter((x) => x.trustLevel).length >= want.length, 10000, 'trust events'))
      .evs.filter((x) => x.trustLevel);
    assertEq(avc.map((e) => `${e.cmHandle}:${e.previousTrustLevel || '-'}:${e.trustLevel}`).join(), want.join(), 'opsd format');
    const n = (await collect(c, 'tn', (e) => e.filter((x) => x.type).length >= want.length, 10000, 'AvcEvents')).evs.filter((x) => x.type);
    for (const e of n) {
      assertEq(JSON.stringify([e.specversion, e.source, e.type, e.dataschema]), JSON.stringify(['1.0', 'NCMP',
        'org.onap.cps.ncmp.events.avc.ncmp_to_client.AvcEvent', 'urn:cps:org.onap.cps.ncmp.events.avc.ncmp_to_client.AvcEvent:1.0.0']), 'CloudEvent header');
      assert(/^[0-9a-f-]{36}$/.test(e.id) && e.time, 'id and time');
    }
    assertEq(JSON.stringify(n[0].data), '{"data":{"attributeValueChange":[{"attributeName":"trustLevel","newAttributeValue":"NONE"}]}}',
      'a handle registered NONE (as ONAP\'s integration test expects it)');
    assertEq(n[1].correlationid, 'tr-1', 'correlationid is the cm handle');
    assertEq(JSON.stringify(n[1].data.data.attributeValueChange[0]), '{"attributeName":"trustLevel","oldAttributeValue":"COMPLETE","newAttributeValue":"NONE"}', 'plugin down');
    // a subscription without trust: true gets none
    const plain = await collect(c, 'plain', (e) => e.length >= 2, 5000, 'plain events');
    assert(plain.evs.every((e) => e.state === 'DELETED'), 'no trust events without trust: true');
  } finally {
    c.ws.close();
    await p.close();
  }
});

await test('ncmp: SIGTERM exits 0 and no sanitizer report', async () => {
  const r = await d.stop('SIGTERM', 10000);
  assertEq(JSON.stringify([r.code, r.signal, r.killed]), JSON.stringify([0, null, false]), 'exit');
  const rep = work.sanitizerReport();
  assert(!rep, `sanitizer: ${rep}`);
});

await dmi.close();
await finish();

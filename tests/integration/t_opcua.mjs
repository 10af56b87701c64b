// The OPC UA server against node-opcua's client (node-opcua-client, tests/integration/
// package.json): GetEndpoints, sessions (anonymous as viewer, user name and password from
// server.auth.tokens, a wrong password refused), Browse of Objects and of a folder made from
// name segments, BrowseNext through continuation points, Read of values that match REST
// (value, source time, quality), Write of a writable point seen by REST, refused for a
// viewer, for a point that is not writable and for the wrong type; then raw sockets with
// bad frames (garbage, a chunk larger than the buffer, a lying size, Hello floods, more
// connections than max_connections): each gets an Error message and a closed connection,
// and the server goes on answering. docs/API.md "OPC UA".
import net from 'node:net';
import { join } from 'node:path';
import { test, finish, assert, assertEq, sleep, failTest } from './lib/harness.mjs';
import { workDir, startOpsd, standardConfig, http, freePort } from './lib/opsd.mjs';
import {
  OPCUAClient, AttributeIds, DataType, MessageSecurityMode, SecurityPolicy, StatusCodes, UserTokenType,
  ClientSubscription, ClientMonitoredItem, TimestampsToReturn,
} from 'node-opcua-client';

const work = workDir('t_opcua');
const dataDir = join(work.dir, 'data');
const uaPort = await freePort();
const url = `opc.tcp://127.0.0.1:${uaPort}`;
const auth = `  auth:
    tokens:
      - {name: viewer1, token: v-tok, role: viewer}
      - {name: ops, token: o-tok, role: operator}`;
const extra = `  - {name: "area/pump-{1..3}", type: double, writable: true, description: "pump speed"}
  - {name: "area/sub/valve", type: bool, writable: true}
opcua:
  listen: 127.0.0.1:${uaPort}
  anonymous: viewer
  max_connections: 20
`;
const config = (port) => standardConfig({ port, dataDir, auth, pointsExtra: extra });
const OP = { Authorization: 'Bearer o-tok' };

let d;
try {
  d = await startOpsd(work, { config });
} catch (e) {
  failTest('opcua: opsd starts', e.message);
  await finish();
}

const clients = [];
async function connect(userIdentity) {
  const client = OPCUAClient.create({
    endpointMustExist: false,
    connectionStrategy: { maxRetry: 0, initialDelay: 100 },
    securityMode: MessageSecurityMode.None,
    securityPolicy: SecurityPolicy.None,
    requestedSessionTimeout: 60000,
  });
  await client.connect(url);
  clients.push(client);
  const session = await client.createSession(userIdentity);
  return { client, session };
}

let anon;
await test('opcua: GetEndpoints offers None with anonymous and user name tokens', async () => {
  const client = OPCUAClient.create({ endpointMustExist: false, connectionStrategy: { maxRetry: 0 } });
  await client.connect(url);
  const eps = await client.getEndpoints();
  await client.disconnect();
  assertEq(eps.length, 1, 'endpoints');
  assertEq(eps[0].securityMode, MessageSecurityMode.None, 'security mode');
  assertEq(eps[0].securityPolicyUri, SecurityPolicy.None, 'security policy');
  const types = eps[0].userIdentityTokens.map((t) => t.tokenType).sort();
  assertEq(JSON.stringify(types), JSON.stringify([UserTokenType.Anonymous, UserTokenType.UserName]), 'token types');
  assertEq(eps[0].endpointUrl, url, 'endpoint url');
});

await test('opcua: anonymous session browses Objects and a folder from name segments', async () => {
  anon = await connect();
  const br = await anon.session.browse('ns=0;i=85');
  assertEq(br.statusCode.value, StatusCodes.Good.value, 'browse status');
  const names = br.references.map((r) => r.browseName.name);
  assert(names.includes('Server'), 'Server under Objects');
  assert(names.includes('area'), `folder area under Objects: ${names.slice(0, 10)}`);
  assert(names.includes('ext-000') && names.includes('tank1-0099'), 'flat points under Objects');
  const area = br.references.find((r) => r.browseName.name === 'area');
  assertEq(area.nodeId.toString(), 'ns=2;s=area', 'folder node id');
  const inner = await anon.session.browse('ns=2;s=area');
  const inNames = inner.references.map((r) => r.browseName.name);
  assertEq(JSON.stringify(inNames), JSON.stringify(['sub', 'pump-1', 'pump-2', 'pump-3']), 'folder contents');
  const p1 = inner.references.find((r) => r.browseName.name === 'pump-1');
  assertEq(p1.nodeId.toString(), 'ns=1;s=area/pump-1', 'point node id');
  assertEq(p1.nodeClass, 2, 'points are variables');
  const ns = await anon.session.readNamespaceArray();
  assertEq(ns[1], 'urn:opsd:points', 'namespace 1');
});

await test('opcua: BrowseNext pages through Objects with continuation points', async () => {
  anon.session.requestedMaxReferencesPerNode = 25;
  let r = await anon.session.browse({ nodeId: 'ns=0;i=85', referenceTypeId: 'HierarchicalReferences', includeSubtypes: true, browseDirection: 0, resultMask: 63 });
  let all = r.references.length;
  assertEq(all, 25, 'first page');
  let pages = 1;
  while (r.continuationPoint && r.continuationPoint.length) {
    r = await anon.session.browseNext(r.continuationPoint, false);
    all += r.references.length;
    pages++;
    assert(pages < 20, 'too many pages');
  }
  // Server, area, 100 tanks, 10 ext, flag, count, label
  assertEq(all, 1 + 1 + 100 + 10 + 3, 'references in all');
  anon.session.requestedMaxReferencesPerNode = 0;
});

await test('opcua: Read matches REST (value, source time, quality) and the attributes', async () => {
  const put = await http(d, 'PUT', '/api/v1/points/ext-001', { value: 42.25 }, OP);
  assertEq(put.status, 200, `PUT (${put.text})`);
  const rest = (await http(d, 'GET', '/api/v1/points/ext-001', undefined, OP)).json;
  const dv = await anon.session.read({ nodeId: 'ns=1;s=ext-001', attributeId: AttributeIds.Value });
  assertEq(dv.statusCode.value, StatusCodes.Good.value, 'status');
  assertEq(dv.value.dataType, DataType.Double, 'type');
  assertEq(dv.value.value, rest.value, 'value');
  assertEq(dv.sourceTimestamp.getTime(), rest.ts, 'source time');
  const tank = await anon.session.read({ nodeId: 'ns=1;s=tank1-0005', attributeId: AttributeIds.Value });
  const tr = (await http(d, 'GET', '/api/v1/points/tank1-0005', undefined, OP)).json;
  assertEq(tank.statusCode.value, StatusCodes.Good.value, 'simulated point status');
  assert(Math.abs(tank.sourceTimestamp.getTime() - tr.ts) < 1000, 'simulated point time near REST');
  const attrs = await anon.session.read([
    { nodeId: 'ns=1;s=area/pump-2', attributeId: AttributeIds.DataType },
    { nodeId: 'ns=1;s=area/pump-2', attributeId: AttributeIds.DisplayName },
    { nodeId: 'ns=1;s=area/pump-2', attributeId: AttributeIds.Description },
    { nodeId: 'ns=1;s=area/pump-2', attributeId: AttributeIds.AccessLevel },
    { nodeId: 'ns=1;s=area/pump-2', attributeId: AttributeIds.UserAccessLevel },
    { nodeId: 'ns=1;s=count', attributeId: AttributeIds.DataType },
    { nodeId: 'ns=1;s=nope', attributeId: AttributeIds.Value },
    { nodeId: 'ns=1;s=area/pump-2', attributeId: AttributeIds.Value },
  ]);
  assertEq(attrs[0].value.value.toString(), 'ns=0;i=11', 'Double data type');
  assertEq(attrs[1].value.value.text, 'pump-2', 'display name');
  assertEq(attrs[2].value.value.text, 'pump speed', 'description');
  assertEq(attrs[3].value.value, 3, 'access level: read and write');
  assertEq(attrs[4].value.value, 1, 'a viewer may only read');
  assertEq(attrs[5].value.value.toString(), 'ns=0;i=8', 'Int64 data type');
  assertEq(attrs[6].statusCode.value, StatusCodes.BadNodeIdUnknown.value, 'unknown node');
  assertEq(attrs[7].statusCode.value, StatusCodes.BadWaitingForInitialData.value, 'no value yet');
});

await test('opcua: a subscription gets the first value, then every change with its source time', async () => {
  const sub = ClientSubscription.create(anon.session, {
    requestedPublishingInterval: 100, requestedLifetimeCount: 100, requestedMaxKeepAliveCount: 10,
    maxNotificationsPerPublish: 0, publishingEnabled: true, priority: 1,
  });
  await new Promise((resolve, reject) => { sub.on('started', resolve); sub.on('internal_error', reject); });
  const seen = [];
  const item = ClientMonitoredItem.create(sub, { nodeId: 'ns=1;s=ext-005', attributeId: AttributeIds.Value },
    { samplingInterval: 100, discardOldest: true, queueSize: 1 }, TimestampsToReturn.Both);
  item.on('changed', (dv) => seen.push(dv));
  const t0 = Date.now();
  while (seen.length < 1 && Date.now() - t0 < 5000) await sleep(50);
  assertEq(seen.length, 1, 'the first notification');
  assertEq(seen[0].statusCode.value, StatusCodes.BadWaitingForInitialData.value, 'no value yet');
  for (let i = 1; i <= 5; i++) {
    const ts = 1764460800000 + i * 1000;
    const r = await http(d, 'POST', '/api/v1/samples', { samples: [{ point: 'ext-005', ts, value: i * 1.5 }] }, OP);
    assertEq(r.status, 200, `samples (${r.text})`);
    const t1 = Date.now();
    while (seen.length < i + 1 && Date.now() - t1 < 5000) await sleep(20);
    assertEq(seen.length, i + 1, `notification ${i}`);
    assertEq(seen[i].value.value, i * 1.5, `value ${i}`);
    assertEq(seen[i].sourceTimestamp.getTime(), ts, `source time ${i}`);
  }
  // a tank point changes on its own every 200 ms: several notifications arrive
  const many = [];
  const tank = ClientMonitoredItem.create(sub, { nodeId: 'ns=1;s=tank1-0007', attributeId: AttributeIds.Value },
    { samplingInterval: 100, discardOldest: true, queueSize: 1 }, TimestampsToReturn.Both);
  tank.on('changed', (dv) => many.push(dv));
  await sleep(1500);
  assert(many.length >= 4, `tank notifications: ${many.length}`);
  await sub.terminate();
});

await test('opcua: a viewer cannot write', async () => {
  const st = await anon.session.write({ nodeId: 'ns=1;s=ext-002', attributeId: AttributeIds.Value, value: { value: { dataType: DataType.Double, value: 1 } } });
  assertEq(st.value, StatusCodes.BadUserAccessDenied.value, 'status');
});

await test('opcua: a wrong password is refused', async () => {
  let refused = false;
  try {
    await connect({ type: UserTokenType.UserName, userName: 'ops', password: 'wrong' });
  } catch {
    refused = true;
  }
  assert(refused, 'session with a wrong password');
});

await test('opcua: an operator writes; REST sees it; bad writes are refused', async () => {
  const op = await connect({ type: UserTokenType.UserName, userName: 'ops', password: 'o-tok' });
  const st = await op.session.write([
    { nodeId: 'ns=1;s=ext-002', attributeId: AttributeIds.Value, value: { value: { dataType: DataType.Double, value: 3.5 } } },
    { nodeId: 'ns=1;s=area/sub/valve', attributeId: AttributeIds.Value, value: { value: { dataType: DataType.Boolean, value: true } } },
    { nodeId: 'ns=1;s=label', attributeId: AttributeIds.Value, value: { value: { dataType: DataType.String, value: 'héllo' } } },
    { nodeId: 'ns=1;s=count', attributeId: AttributeIds.Value, value: { value: { dataType: DataType.Int32, value: -7 } } },
    { nodeId: 'ns=1;s=ext-003', attributeId: AttributeIds.Value, value: { value: { dataType: DataType.String, value: 'x' } } },
    { nodeId: 'ns=1;s=tank1-0001', attributeId: AttributeIds.Value, value: { value: { dataType: DataType.Double, value: 1 } } },
    { nodeId: 'ns=1;s=ext-004', attributeId: AttributeIds.DisplayName, value: { value: { dataType: DataType.LocalizedText, value: { text: 'x' } } } },
  ]);
  const codes = st.map((s) => s.name);
  assertEq(JSON.stringify(codes), JSON.stringify(['Good', 'Good', 'Good', 'Good', 'BadTypeMismatch', 'BadNotWritable', 'BadNotWritable']), 'write results');
  const get = async (n) => (await http(d, 'GET', `/api/v1/points/${n}`, undefined, OP)).json.value;
  assertEq(await get('ext-002'), 3.5, 'ext-002 over REST');
  assertEq(await get('area/sub/valve'), true, 'valve over REST');
  assertEq(await get('label'), 'héllo', 'label over REST');
  assertEq(await get('count'), -7, 'count over REST');
  const dv = await op.session.read({ nodeId: 'ns=1;s=ext-002', attributeId: AttributeIds.Value });
  assertEq(dv.value.value, 3.5, 'read back');
  await op.session.close();
});

// ---- raw sockets ----

// Sends bytes, collects what comes back until the server closes (or ms pass).
function raw(chunks, ms = 3000) {
  return new Promise((resolve) => {
    const s = net.connect(uaPort, '127.0.0.1');
    let got = Buffer.alloc(0);
    let closed = false;
    const t = setTimeout(() => { s.destroy(); resolve({ got, closed }); }, ms);
    s.on('data', (b) => { got = Buffer.concat([got, b]); });
    s.on('close', () => { closed = true; clearTimeout(t); resolve({ got, closed }); });
    s.on('error', () => {});
    s.on('connect', () => { for (const c of chunks) s.write(c); });
  });
}
const errOf = (got) => (got.length >= 12 && got.subarray(0, 3).toString() === 'ERR' ? got.readUInt32LE(8) : null);
function hello(rbuf = 65536, sbuf = 65536, urlText = url) {
  const u = Buffer.from(urlText);
  const b = Buffer.alloc(32 + u.length);
  b.write('HELF', 0);
  b.writeUInt32LE(b.length, 4);
  b.writeUInt32LE(0, 8);
  b.writeUInt32LE(rbuf, 12);
  b.writeUInt32LE(sbuf, 16);
  b.writeUInt32LE(0, 20);
  b.writeUInt32LE(0, 24);
  b.writeInt32LE(u.length, 28);
  u.copy(b, 32);
  return b;
}

await test('opcua: bad frames get an Error message and a closed connection', async () => {
  const cases = [
    ['an HTTP request (its bytes read as a huge size)', [Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n\r\n')], StatusCodes.BadTcpMessageTooLarge.value],
    ['an unknown message type', [Buffer.concat([Buffer.from('XYZF\x28\x00\x00\x00', 'latin1'), Buffer.alloc(32)])], StatusCodes.BadTcpMessageTypeInvalid.value],
    ['chunk larger than the buffer', [Buffer.from('HELF\xff\xff\xff\x7f', 'latin1')], StatusCodes.BadTcpMessageTooLarge.value],
    ['size shorter than a header', [Buffer.from('HELF\x04\x00\x00\x00', 'latin1')], StatusCodes.BadDecodingError.value],
    ['small buffers', [hello(1024, 1024)], StatusCodes.BadTcpNotEnoughResources.value],
    ['long endpoint URL', [hello(65536, 65536, 'opc.tcp://' + 'a'.repeat(5000))], StatusCodes.BadTcpEndpointUrlInvalid.value],
    ['MSG before a channel', [hello(), Buffer.concat([Buffer.from('MSGF\x20\x00\x00\x00', 'latin1'), Buffer.alloc(24)])], StatusCodes.BadTcpSecureChannelUnknown.value],
  ];
  for (const [what, chunks, want] of cases) {
    const r = await raw(chunks);
    assert(r.closed, `${what}: connection closed`);
    // after Hello the Acknowledge comes first
    let got = r.got;
    if (got.subarray(0, 3).toString() === 'ACK') got = got.subarray(got.readUInt32LE(4));
    assertEq(errOf(got), want, `${what}: error status`);
  }
  // a Hello cut short waits; the connection stays open without an answer
  const t = await raw([hello().subarray(0, 20)], 800);
  assertEq(t.got.length, 0, 'truncated Hello: no answer yet');
  assert(!t.closed, 'truncated Hello: still open');
});

await test('opcua: a Hello flood and too many connections are bounded; the server goes on', async () => {
  const socks = [];
  const errors = [];
  for (let i = 0; i < 40; i++) {
    const s = net.connect(uaPort, '127.0.0.1');
    let got = Buffer.alloc(0);
    s.on('data', (b) => { got = Buffer.concat([got, b]); });
    s.on('error', () => {});
    s.on('close', () => { if (errOf(got) !== null) errors.push(errOf(got)); });
    s.on('connect', () => s.write(hello().subarray(0, 10)));
    socks.push(s);
  }
  await sleep(1500);
  assert(errors.length >= 20, `connections past max_connections refused: ${errors.length}`);
  assert(errors.every((e) => e === StatusCodes.BadTcpServerTooBusy.value), `BadTcpServerTooBusy: ${errors}`);
  for (const s of socks) s.destroy();
  await sleep(500);
  const m = (await http(d, 'GET', '/metrics', undefined, OP)).text;
  assert(/opsd_opcua_errors_total \d+/.test(m), 'opcua metrics');
  // and a real client is served again
  const dv = await anon.session.read({ nodeId: 'ns=1;s=ext-001', attributeId: AttributeIds.Value });
  assertEq(dv.value.value, 42.25, 'read after the flood');
});

for (const c of clients) {
  try { await c.disconnect(); } catch { /* gone */ }
}
await test('opcua: opsd stops cleanly', async () => {
  const r = await d.stop();
  assertEq(r.code, 0, 'exit code');
});
await finish();

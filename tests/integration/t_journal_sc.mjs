// ServiceControl's audit API over the journal: NServiceBus-shaped messages published to a
// private rabbitmq-server as the RabbitMQ transport publishes them (amqplib), then every route
// of a ServiceControl audit instance read by a client written from ServiceControl's own types
// (MessagesView, EndpointDetails, KnownEndpointsView, AuditCount, SagaHistory, RootUrls) and
// headers (Total-Count, Link, ETag, X-Particular-Version). The derivations of its enrichers:
// DeliverAt, negative times, host display name and ids, retries as records of their own,
// status, sagas, the GUID of a message without NServiceBus.MessageId, old address headers.
// docs/API.md "ServiceControl's audit API".
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { test, finish, assert, assertEq, sleep, failTest } from './lib/harness.mjs';
import { workDir, startOpsd, http } from './lib/opsd.mjs';
import { startRabbit, amqp } from './lib/journal_rabbit.mjs';

const work = workDir('t_journal_sc');
const dataDir = join(work.dir, 'data');
const QUEUE = 'audit-sc';

let rabbit;
try {
  rabbit = await startRabbit(work);
} catch (e) {
  failTest('journal sc: rabbitmq-server starts', e.message);
  work.keep = true;
  await finish();
}

const config = (port) => `
server: {listen: 127.0.0.1:${port}, data_dir: ${dataDir}}
journal:
  retention: 2h
  partition: 10m
  disk_floor: 0
  amqp: {host: 127.0.0.1, port: ${rabbit.port}, user: guest, password: guest, queue: ${QUEUE}, prefetch: 200}
`;

// ServiceControl's DeterministicGuid.MakeId: MD5 of the UTF-8 string read as a .NET Guid.
function detGuid(s) {
  const d = createHash('md5').update(s, 'utf8').digest();
  const b = [3, 2, 1, 0, 5, 4, 7, 6, 8, 9, 10, 11, 12, 13, 14, 15].map((i) => d[i].toString(16).padStart(2, '0')).join('');
  return `${b.slice(0, 8)}-${b.slice(8, 12)}-${b.slice(12, 16)}-${b.slice(16, 20)}-${b.slice(20)}`;
}
// NServiceBus' wire time: yyyy-MM-dd HH:mm:ss:ffffff Z
const wire = (ms) => new Date(ms).toISOString().replace('T', ' ').replace(/\.(\d{3})Z$/, ':$1000 Z');

const conn = await amqp.connect(rabbit.url);
const ch = await conn.createConfirmChannel();
await ch.assertQueue(QUEUE, { durable: true });
async function publish(items) {
  for (const it of items) {
    ch.sendToQueue(QUEUE, Buffer.from(it.body ?? ''), { persistent: true, headers: it.headers, messageId: it.messageId,
      contentType: it.contentType });
  }
  await ch.waitForConfirms();
}

let d;
try {
  d = await startOpsd(work, { config });
} catch (e) {
  failTest('journal sc: opsd starts', e.message);
  work.keep = true;
  await finish();
}

// ---- a client written from ServiceControl's types ----
const GUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const DATETIME = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,7})?Z$/;
const TIMESPAN = /^-?(\d+\.)?\d\d:\d\d:\d\d(\.\d{7})?$/;
const VIEW_KEYS = new Set(['id', 'message_id', 'message_type', 'sending_endpoint', 'receiving_endpoint', 'time_sent',
  'processed_at', 'critical_time', 'processing_time', 'delivery_time', 'is_system_message', 'conversation_id', 'headers',
  'status', 'message_intent', 'body_url', 'body_size', 'invoked_sagas', 'originates_from_saga', 'instance_id']);
function checkEndpoint(e, what) {
  if (e === undefined) return;
  assertEq(Object.keys(e).sort().join(), 'host,host_id,name', `${what} keys`);
  assert(typeof e.name === 'string' && typeof e.host === 'string' && GUID.test(e.host_id), `${what}: ${JSON.stringify(e)}`);
}
function checkSaga(s, what) {
  assert(typeof s.saga_type === 'string' && GUID.test(s.saga_id), `${what}: ${JSON.stringify(s)}`);
  if (s.change_status !== undefined) assert(['New', 'Updated', 'Completed'].includes(s.change_status), `${what} change`);
}
function checkView(m) {
  for (const k of Object.keys(m)) assert(VIEW_KEYS.has(k), `unknown MessagesView key ${k}`);
  assert(typeof m.id === 'string' && typeof m.message_id === 'string', `ids ${m.id} ${m.message_id}`);
  if (m.message_type !== undefined) assertEq(typeof m.message_type, 'string', 'message_type');
  checkEndpoint(m.sending_endpoint, 'sending_endpoint');
  checkEndpoint(m.receiving_endpoint, 'receiving_endpoint');
  if (m.time_sent !== undefined) assert(DATETIME.test(m.time_sent), `time_sent ${m.time_sent}`);
  assert(DATETIME.test(m.processed_at), `processed_at ${m.processed_at}`);
  for (const k of ['critical_time', 'processing_time', 'delivery_time']) assert(TIMESPAN.test(m[k]), `${k} ${m[k]}`);
  assertEq(typeof m.is_system_message, 'boolean', 'is_system_message');
  assert(Array.isArray(m.headers) && m.headers.every((h) => Object.keys(h).join() === 'key,value' &&
    typeof h.key === 'string' && typeof h.value === 'string'), 'headers are [{key, value}]');
  assert(['successful', 'resolvedSuccessfully'].includes(m.status), `status ${m.status}`);
  assert(['send', 'publish', 'reply', 'subscribe', 'unsubscribe', 0].includes(m.message_intent), `intent ${m.message_intent}`);
  if (m.body_url !== undefined) assert(/^\/messages\/.+\/body$/.test(m.body_url), `body_url ${m.body_url}`);
  assert(Number.isInteger(m.body_size), 'body_size');
  if (m.invoked_sagas !== undefined) m.invoked_sagas.forEach((s) => checkSaga(s, 'invoked_sagas'));
  if (m.originates_from_saga !== undefined) checkSaga(m.originates_from_saga, 'originates_from_saga');
  return m;
}
async function sc(path, headers) {
  const r = await http(d, 'GET', `/api${path}`, undefined, headers);
  assertEq(r.headers.get('x-particular-version'), '6.0.0', `X-Particular-Version on ${path}`);
  assertEq(r.headers.get('access-control-allow-origin'), '*', `CORS on ${path}`);
  return r;
}
async function views(path) {
  const r = await sc(path);
  assertEq(r.status, 200, `${path}: ${r.text.slice(0, 200)}`);
  assert(Array.isArray(r.json), `${path} is an array`);
  r.json.forEach(checkView);
  const tc = r.headers.get('total-count');
  assert(tc !== null && Number(tc) >= r.json.length, `${path} Total-Count ${tc}`);
  return { list: r.json, total: Number(tc), link: r.headers.get('link'), etag: r.headers.get('etag') };
}
const hv = (m, k) => m.headers.find((h) => h.key === k)?.value;

// ---- the messages ----
const now = Date.now() - 120000;
const base = (id, o = {}) => ({
  'NServiceBus.MessageId': id,
  'NServiceBus.MessageIntent': o.intent ?? 'Send',
  'NServiceBus.ConversationId': o.conv ?? 'conv-A',
  'NServiceBus.EnclosedMessageTypes': `${o.type ?? 'Shop.Messages.PlaceOrder'}, Shop.Messages, Version=1.0.0.0, Culture=neutral, PublicKeyToken=null`,
  'NServiceBus.OriginatingEndpoint': o.from ?? 'ClientUI',
  'NServiceBus.OriginatingMachine': 'WEB01',
  '$.diagnostics.originating.hostid': '3f1a0000-0000-4000-8000-0000000000c1',
  'NServiceBus.ProcessingEndpoint': o.to ?? 'Sales',
  'NServiceBus.ProcessingMachine': 'app01',
  '$.diagnostics.hostid': o.hostId ?? '9b2c0000-0000-4000-8000-0000000000a1',
  '$.diagnostics.hostdisplayname': 'APP01 (blue)',
  'NServiceBus.ContentType': 'application/json',
  'NServiceBus.TimeSent': wire(o.sent ?? now),
  'NServiceBus.ProcessingStarted': wire(o.started ?? (o.sent ?? now) + 5),
  'NServiceBus.ProcessingEnded': wire(o.ended ?? (o.sent ?? now) + 25),
  'NServiceBus.Version': '9.2.3',
});
const SAGA = '5e0c9d2a-1111-4222-8333-444455556666';
const sagaUpdated = JSON.stringify({
  SagaState: '{"OrderId":42}', SagaId: SAGA,
  Initiator: { InitiatingMessageId: 't-1', MessageType: 'Shop.Timeouts.BuyersRemorse', IsSagaTimeoutMessage: true,
    TimeSent: new Date(now).toISOString(), OriginatingMachine: 'app01', OriginatingEndpoint: 'Sales', Intent: 'Send' },
  ResultingMessages: [{ ResultingMessageId: 'o-1', MessageType: 'Shop.Messages.OrderAccepted', TimeSent: new Date(now + 10004).toISOString(),
    Destination: 'Billing', Intent: 'Publish' }],
  Endpoint: 'Sales', IsNew: false, IsCompleted: true, StartTime: new Date(now + 10002).toISOString(),
  FinishTime: new Date(now + 10005).toISOString(), SagaType: 'Shop.OrderSaga',
});
const retryFirst = { headers: base('x-1', { conv: 'conv-R', sent: now + 1000 }), body: '{"n":1}' };
const items = [
  { headers: base('c-1'), body: '{"orderId":42,"item":"widget"}' },
  { headers: { ...base('e-1', { intent: 'Publish', type: 'Shop.Events.OrderPlaced', from: 'Sales', to: 'Billing' }),
    'NServiceBus.RelatedTo': 'c-1' }, body: '{"orderId":42}' },
  { headers: { ...base('e-1', { intent: 'Publish', type: 'Shop.Events.OrderPlaced', from: 'Sales', to: 'Shipping' }),
    'NServiceBus.RelatedTo': 'c-1' }, body: '{"orderId":42}' },
  { headers: { ...base('r-1', { intent: 'Reply', type: 'Shop.Messages.Billed', from: 'Billing', to: 'Sales' }),
    'NServiceBus.RelatedTo': 'e-1' }, body: '{}' },
  // a saga timeout, due 10 s after it was sent, processed 2 ms after it was due
  { headers: { ...base('t-1', { type: 'Shop.Timeouts.BuyersRemorse', from: 'Sales', sent: now, started: now + 10002, ended: now + 10005 }),
    'NServiceBus.DeliverAt': wire(now + 10000), 'NServiceBus.IsSagaTimeoutMessage': 'True',
    'NServiceBus.SagaId': SAGA, 'NServiceBus.SagaType': 'Shop.OrderSaga, Shop',
    'NServiceBus.InvokedSagas': `Shop.OrderSaga:${SAGA}`, 'ServiceControl.SagaStateChange': `${SAGA}:Completed`,
    'NServiceBus.OriginatingSagaId': SAGA, 'NServiceBus.OriginatingSagaType': 'Shop.OrderSaga, Shop, Version=1.0.0.0' }, body: '{}' },
  // processed once, then sent again by ServiceControl (a retry) and processed again
  retryFirst,
  { headers: { ...base('x-1', { conv: 'conv-R', sent: now + 1000, started: now + 60000, ended: now + 60030 }),
    'ServiceControl.Retry.UniqueMessageId': 'failed-x-1' }, body: '{"n":1}' },
  retryFirst, // the broker delivering the first again: a copy, not a record
  // no NServiceBus.MessageId: the transport's id
  { headers: (({ 'NServiceBus.MessageId': _, ...h }) => h)(base('-', { conv: 'conv-N' })), messageId: 'native-7', body: '{}' },
  // the receiver's clock 2 s behind the sender's
  { headers: base('k-1', { conv: 'conv-K', sent: now + 2000, started: now, ended: now + 500 }), body: '{}' },
  // NServiceBus 3/4 address headers only
  { headers: { 'NServiceBus.MessageId': 'l-1', 'NServiceBus.OriginatingAddress': 'Legacy.Sender@OLD01',
    'NServiceBus.FailedQ': 'Legacy.Receiver@OLD02', 'NServiceBus.ConversationId': 'conv-L', 'NServiceBus.MessageIntent': 'Send',
    'NServiceBus.TimeSent': wire(now), 'NServiceBus.ProcessingEnded': wire(now + 10) }, body: '' },
  // a control message and a saga audit message: system messages
  { headers: { 'NServiceBus.MessageId': 'ctl-1', 'NServiceBus.ControlMessage': 'True', 'NServiceBus.ProcessingEndpoint': 'Sales',
    'NServiceBus.ProcessingMachine': 'app01', 'NServiceBus.ConversationId': 'conv-S' }, body: '' },
  { headers: { 'NServiceBus.MessageId': 'sa-1', 'NServiceBus.EnclosedMessageTypes': 'ServiceControl.EndpointPlugin.Messages.SagaState.SagaUpdatedMessage',
    'NServiceBus.ContentType': 'application/json', 'NServiceBus.ProcessingEndpoint': 'audit', 'NServiceBus.ConversationId': 'conv-S',
    'NServiceBus.OriginatingEndpoint': 'Sales', 'NServiceBus.OriginatingMachine': 'app01' }, body: sagaUpdated },
];
const BULK = 120;
for (let i = 0; i < BULK; i++) {
  items.push({ headers: base(`bulk-${String(i).padStart(3, '0')}`, { to: 'Bulk', conv: 'conv-B', type: i % 2 ? 'Bulk.Odd' : 'Bulk.Even',
    sent: now + i * 100, started: now + i * 100 + (i * 7) % 50, ended: now + i * 100 + 60 + (i * 13) % 97 }), body: `{"i":${i}}` });
}
const USER = items.length - 3; // all but the copy and the two system messages
await publish(items);

async function waitFor(fn, ms, what) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    last = await fn();
    if (last === true) return;
    await sleep(150);
  }
  throw new Error(`${what} (last: ${JSON.stringify(last)})`);
}

await test('journal sc: every message ingested through RabbitMQ, a retry a record of its own, a copy not', async () => {
  // items: the copy of the first x-1 is not stored; the control and saga audit messages are
  // system messages (out of the default lists)
  await waitFor(async () => (await views('/messages?include_system_messages=true&per_page=1')).total === items.length - 1 ||
    (await views('/messages?include_system_messages=true&per_page=1')).total, 30000, 'all stored');
  assertEq((await views('/messages?per_page=1')).total, USER, 'non-system messages');
  const r = await views('/conversations/conv-R?sort=processed_at&direction=asc');
  assertEq(r.total, 2, 'two processings of x-1');
  assertEq(r.list.map((m) => m.status).join(), 'successful,resolvedSuccessfully', 'status');
  assertEq(r.list[0].id, detGuid('x-1Sales'), "ServiceControl's unique id");
  assertEq(r.list[1].id, 'failed-x-1', 'a retry keeps the failed message id');
});

await test('journal sc: MessagesView of a command: endpoints with host ids, times, headers, body url', async () => {
  const m = (await views('/messages/search/c-1')).list.find((x) => x.message_id === 'c-1');
  assert(m, 'found by its id');
  assertEq(m.message_type, 'Shop.Messages.PlaceOrder', 'type');
  assertEq(JSON.stringify(m.receiving_endpoint), JSON.stringify({ name: 'Sales', host_id: '9b2c0000-0000-4000-8000-0000000000a1', host: 'APP01 (blue)' }), 'receiving endpoint');
  assertEq(JSON.stringify(m.sending_endpoint), JSON.stringify({ name: 'ClientUI', host_id: '3f1a0000-0000-4000-8000-0000000000c1', host: 'WEB01' }), 'sending endpoint');
  assertEq(m.processing_time, '00:00:00.0200000', 'processing');
  assertEq(m.critical_time, '00:00:00.0250000', 'critical');
  assertEq(m.delivery_time, '00:00:00.0050000', 'delivery');
  assertEq(m.time_sent, new Date(now).toISOString().replace(/\.?0+Z$/, 'Z').replace(/\.Z$/, 'Z'), 'time sent');
  assertEq(m.message_intent, 'send', 'intent');
  assertEq(m.conversation_id, 'conv-A', 'conversation');
  assertEq(m.body_url, '/messages/c-1/body', 'body url');
  assertEq(m.body_size, 30, 'body size');
  assertEq(hv(m, 'NServiceBus.Version'), '9.2.3', 'headers verbatim');
});

await test('journal sc: an event to two subscribers, a reply, a saga timeout (DeliverAt), skewed clocks, legacy addresses', async () => {
  const ev = (await views('/conversations/conv-A?per_page=50')).list;
  const e1 = ev.filter((m) => m.message_id === 'e-1');
  assertEq(e1.map((m) => m.receiving_endpoint.name).sort().join(), 'Billing,Shipping', 'one record per subscriber');
  assertEq(e1.map((m) => m.id).sort().join(), [detGuid('e-1Billing'), detGuid('e-1Shipping')].sort().join(), 'ids');
  assertEq(e1[0].message_intent, 'publish', 'publish');
  assertEq(ev.find((m) => m.message_id === 'r-1').message_intent, 'reply', 'reply');
  const t = ev.find((m) => m.message_id === 't-1');
  assertEq(t.critical_time, '00:00:00.0050000', 'critical time from DeliverAt (not 10,005 ms)');
  assertEq(t.delivery_time, '00:00:00.0020000', 'delivery time from DeliverAt');
  assertEq(JSON.stringify(t.invoked_sagas), JSON.stringify([{ change_status: 'Completed', saga_type: 'Shop.OrderSaga', saga_id: SAGA }]), 'invoked sagas');
  assertEq(JSON.stringify(t.originates_from_saga), JSON.stringify({ saga_type: 'Shop.OrderSaga', saga_id: SAGA }), 'originates from saga');
  const k = (await views('/conversations/conv-K')).list[0];
  assertEq(k.critical_time, '-00:00:01.5000000', 'negative critical time kept');
  assertEq(k.delivery_time, '-00:00:02', 'negative delivery time kept');
  const l = (await views('/conversations/conv-L')).list[0];
  assertEq(JSON.stringify(l.sending_endpoint), JSON.stringify({ name: 'Legacy.Sender', host_id: '00000000-0000-0000-0000-000000000000', host: 'OLD01' }), 'OriginatingAddress');
  assertEq(JSON.stringify(l.receiving_endpoint), JSON.stringify({ name: 'Legacy.Receiver', host_id: '00000000-0000-0000-0000-000000000000', host: 'OLD02' }), 'FailedQ');
  assertEq(l.body_url, undefined, 'no body, no body url');
  const n = (await views('/conversations/conv-N')).list[0];
  assertEq(n.message_id, detGuid('native-7'), 'the GUID of the AMQP message-id');
  assertEq(n.message_intent, 'send', 'intent');
});

await test('journal sc: paging (page, per_page, Link, Total-Count), every sort key both ways, ETag', async () => {
  const p2 = await views('/endpoints/Bulk/messages?per_page=50&page=2&sort=time_sent&direction=asc');
  assertEq(p2.total, BULK, 'Total-Count');
  assertEq(p2.list.length, 50, 'page size');
  assertEq(p2.list[0].message_id, 'bulk-050', 'page 2 starts at the 51st');
  for (const rel of ['first', 'prev', 'next', 'last']) assert(p2.link && p2.link.includes(`rel="${rel}"`), `Link ${rel}: ${p2.link}`);
  assert(p2.link.includes('<endpoints/Bulk/messages?') && p2.link.includes('page=3>; rel="last"'), `Link paths: ${p2.link}`);
  const p3 = await views('/endpoints/Bulk/messages?per_page=50&page=3&sort=time_sent&direction=asc');
  assertEq(p3.list.length, 20, 'last page');
  assertEq((await views('/endpoints/Bulk/messages?per_page=50&page=4')).list.length, 0, 'past the end');
  const keyOf = {
    time_sent: (m) => Date.parse(m.time_sent), processed_at: (m) => Date.parse(m.processed_at),
    critical_time: (m) => m.critical_time, processing_time: (m) => m.processing_time, delivery_time: (m) => m.delivery_time,
    message_id: (m) => m.message_id, id: (m) => m.message_id, message_type: (m) => m.message_type, status: () => 0,
  };
  for (const [sort, key] of Object.entries(keyOf)) {
    for (const dir of ['asc', 'desc']) {
      const all = [];
      for (let page = 1; page <= 3; page++) all.push(...(await views(`/endpoints/Bulk/messages?per_page=50&page=${page}&sort=${sort}&direction=${dir}`)).list);
      assertEq(new Set(all.map((m) => m.message_id)).size, BULK, `${sort} ${dir}: every message once`);
      for (let i = 1; i < all.length; i++) {
        const a = key(all[i - 1]), b = key(all[i]);
        assert(dir === 'asc' ? a <= b : a >= b, `${sort} ${dir} out of order at ${i}: ${a} ${b}`);
      }
    }
  }
  const first = await views('/messages?per_page=5');
  const again = await sc('/messages?per_page=5', { 'If-None-Match': first.etag });
  assertEq(again.status, 304, 'If-None-Match');
  const bad = await sc('/messages?sort=nonsense&direction=sideways&per_page=3');
  assertEq(bad.status, 200, 'unknown sort and direction fall back (time_sent desc)');
});

await test('journal sc: search, messages2, endpoint searches, system messages', async () => {
  assertEq((await views('/messages/search?q=widget')).total, 1, 'body words');
  assertEq((await views('/messages/search/widget')).total, 1, 'keyword in the path');
  assertEq((await views('/endpoints/Sales/messages/search/widget')).total, 1, 'endpoint search');
  assertEq((await views('/endpoints/Billing/messages/search?q=widget')).total, 0, 'another endpoint');
  const m2 = await sc('/messages2?page_size=10&endpoint_name=Bulk&sort=time_sent&direction=asc');
  assertEq(m2.status, 200, 'messages2');
  assertEq(Number(m2.headers.get('total-count')), BULK, 'messages2 total');
  assertEq(m2.json.length, 10, 'page_size');
  m2.json.forEach(checkView);
  const from = new Date(now + 50 * 100).toISOString(), to = new Date(now + 59 * 100).toISOString();
  const r = await sc(`/messages2?endpoint_name=Bulk&from=${from}&to=${to}`);
  assertEq(Number(r.headers.get('total-count')), 10, 'messages2 time_sent range');
  const sys = await views('/messages?include_system_messages=true&per_page=200');
  assert(sys.list.some((m) => m.message_id === 'ctl-1' && m.is_system_message), 'a control message is a system message');
  assert(!(await views('/messages?per_page=200')).list.some((m) => m.is_system_message), 'hidden by default');
});

await test('journal sc: bodies, known endpoints, audit counts, sagas, configuration, root, connection', async () => {
  const b = await sc('/messages/c-1/body');
  assertEq(b.status, 200, 'body');
  assertEq(b.headers.get('content-type'), 'application/json', 'the stored content type');
  assertEq(b.text, '{"orderId":42,"item":"widget"}', 'bytes');
  assertEq(b.headers.get('content-security-policy'), 'sandbox', 'a body is never a page of this origin');
  assertEq((await sc('/messages/c-1/body', { 'If-None-Match': b.headers.get('etag') })).status, 304, 'ETag');
  assertEq((await sc('/messages/ctl-1/body')).status, 204, 'empty body: no content');
  assertEq((await sc('/messages/nope/body')).status, 404, 'unknown');
  const k = await sc('/endpoints/known');
  assertEq(k.status, 200, 'known');
  const sales = k.json.filter((e) => e.endpoint_details.name === 'Sales');
  assert(sales.some((e) => e.endpoint_details.host_id === '9b2c0000-0000-4000-8000-0000000000a1' &&
    e.id === detGuid('Sales9b2c0000-0000-4000-8000-0000000000a1') && e.host_display_name === 'APP01 (blue)'), `Sales: ${JSON.stringify(sales)}`);
  const c = await sc('/endpoints/Bulk/audit-count');
  assertEq(c.status, 200, 'audit-count');
  assertEq(c.json.reduce((s, x) => s + x.count, 0), BULK, 'counted');
  assert(c.json.every((x) => DATETIME.test(x.utc_date) && x.utc_date.endsWith('T00:00:00Z')), 'utc dates');
  const s = await sc(`/sagas/${SAGA}`);
  assertEq(s.status, 200, `saga (${s.text.slice(0, 200)})`);
  assertEq(s.json.saga_id, SAGA, 'saga id');
  assertEq(s.json.saga_type, 'Shop.OrderSaga', 'saga type');
  assertEq(s.json.changes.length, 1, 'changes');
  assertEq(s.json.changes[0].status, 'completed', 'status');
  assertEq(s.json.changes[0].initiating_message.is_saga_timeout_message, true, 'initiator');
  assertEq(s.json.changes[0].outgoing_messages[0].destination, 'Billing', 'outgoing');
  assertEq((await sc('/sagas/00000000-0000-0000-0000-000000000001')).status, 404, 'unknown saga');
  const root = await sc('');
  assertEq(root.json.name, 'ServiceControl.Audit', 'root name');
  assertEq(root.json.known_endpoints_url, '/endpoints/known', 'root urls');
  assert(root.json.message_search_url.endsWith('/api/messages/search/{keyword}/{?page,per_page,direction,sort}'), 'search url');
  for (const p of ['/configuration', '/instance-info']) {
    const cfg = await sc(p);
    assertEq(cfg.json.data_retention.audit_retention_period, '02:00:00', `${p} retention`);
    assertEq(cfg.json.transport.audit_queue, QUEUE, `${p} queue`);
  }
  const cn = await sc('/connection');
  assertEq(JSON.stringify(cn.json), JSON.stringify({ MessageAudit: { Enabled: true, AuditQueue: QUEUE }, SagaAudit: { Enabled: true, SagaAuditQueue: QUEUE } }), 'connection');
  // opsd's own API is untouched under the same /api
  assertEq((await http(d, 'GET', '/api/v1/status')).status, 200, '/api/v1 stays opsd\'s');
  assertEq((await http(d, 'GET', '/api/v1/messages/c-1')).json.receiving_host, 'APP01 (blue)', 'opsd view: host display name');
  const pre = await http(d, 'OPTIONS', '/api/messages');
  assertEq(pre.status, 204, 'CORS preflight');
});

await ch.close();
await conn.close();
await finish();

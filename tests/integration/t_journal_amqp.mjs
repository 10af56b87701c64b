// Journal over AMQP 0-9-1: a private rabbitmq-server, messages with NServiceBus headers
// published by amqplib; every message is stored, the queue drains only as batches become
// durable, kill -9 during ingestion loses nothing and stores nothing twice (the broker
// redelivers what was not acknowledged), typed headers kept as the RabbitMQ transport reads
// them, poison messages go to the failed imports without blocking the queue, a large body
// comes back intact.
// docs/API.md "Journal".
import { join } from 'node:path';
import { test, finish, assert, assertEq, sleep, failTest } from './lib/harness.mjs';
import { workDir, startOpsd, http, metrics, diag } from './lib/opsd.mjs';
import { startRabbit, amqp, nsbHeaders } from './lib/journal_rabbit.mjs';

const work = workDir('t_journal_amqp');
const dataDir = join(work.dir, 'data');
const QUEUE = 'audit';

let rabbit;
try {
  rabbit = await startRabbit(work);
} catch (e) {
  failTest('journal amqp: rabbitmq-server starts', e.message);
  work.keep = true;
  await finish();
}

const config = (port) => `
server: {listen: 127.0.0.1:${port}, data_dir: ${dataDir}}
journal:
  retention: 2h
  partition: 10m
  inline_max: 4096
  body_max: 200000
  disk_floor: 0
  amqp: {host: 127.0.0.1, port: ${rabbit.port}, user: guest, password: guest, queue: ${QUEUE}, prefetch: 200}
`;

const conn = await amqp.connect(rabbit.url);
const ch = await conn.createConfirmChannel();
await ch.assertQueue(QUEUE, { durable: true });

async function publish(items) {
  for (const it of items) {
    ch.sendToQueue(QUEUE, Buffer.isBuffer(it.body) ? it.body : Buffer.from(it.body ?? ''),
      { persistent: true, headers: it.headers, messageId: it.messageId, contentType: it.contentType });
  }
  await ch.waitForConfirms();
}

const total = async (dd, q = '') => {
  const r = await http(dd, 'GET', `/api/v1/messages?limit=1${q}`);
  assertEq(r.status, 200, `search status (${r.text.slice(0, 200)})`);
  return r.json.total;
};
const queueDepth = async () => (await ch.checkQueue(QUEUE)).messageCount;
async function waitFor(fn, ms, what) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    last = await fn();
    if (last === true) return;
    await sleep(100);
  }
  throw new Error(`${what} (last: ${JSON.stringify(last)})`);
}

let d;
try {
  d = await startOpsd(work, { config });
} catch (e) {
  failTest('journal amqp: opsd starts', e.message);
  work.keep = true;
  await finish();
}

const N = 500;
await test('journal amqp: every published message is stored, then the queue is empty', async () => {
  const body = (i) => JSON.stringify({ orderId: i, item: `widget-${i}` });
  await publish(Array.from({ length: N }, (_, i) => ({ headers: nsbHeaders(i), body: body(i) })));
  await waitFor(async () => (await total(d)) === N || await total(d), 30000, `${N} messages stored`);
  await waitFor(async () => (await queueDepth()) === 0 || await queueDepth(), 10000, 'queue drained');
  const m = await metrics(d);
  assertEq(m.get('opsd_journal_amqp_acked_total'), N, 'acked');
  assertEq(m.get('opsd_journal_amqp_connected'), 1, 'connected');
  const one = await http(d, 'GET', '/api/v1/messages/msg-000042');
  assertEq(one.status, 200, 'detail');
  assertEq(one.json.type, 'Shop.Messages.PlaceOrder', 'type');
  assertEq(one.json.receiving_endpoint, 'Sales', 'receiving endpoint');
  assertEq(one.json.processing_ms, 20, 'processing time');
  assertEq(one.json.critical_ms, 25, 'critical time');
  assertEq(one.json.headers['NServiceBus.Version'], '8.1.6', 'headers verbatim');
  assertEq(JSON.parse(one.json.body_text).item, 'widget-42', 'body');
  assertEq(await total(d, '&q=widget-42'), 1, 'body is searchable');
});

await test('journal amqp: kill -9 during ingestion, restart: nothing lost, nothing stored twice', async () => {
  const M = 1500;
  const items = Array.from({ length: M }, (_, i) => ({ headers: nsbHeaders(100000 + i, { conv: 'kill' }), body: `k${i}` }));
  await publish(items);
  await waitFor(async () => (await total(d, '&conversation=kill')) > 100 || 'waiting', 20000, 'ingestion started');
  const before = await total(d, '&conversation=kill');
  d.proc.kill('SIGKILL');
  await d.exited;
  diag(`killed with ${before} of ${M} stored`);
  d = await startOpsd(work, { config: (port) => config(port) });
  await waitFor(async () => (await total(d, '&conversation=kill')) === M || await total(d, '&conversation=kill'), 40000,
    `all ${M} stored after the restart`);
  await waitFor(async () => (await queueDepth()) === 0 || await queueDepth(), 10000, 'queue drained');
  assertEq(await total(d), N + M, 'no copies: one row per message id and endpoint');
});

await test('journal amqp: typed headers kept as the RabbitMQ transport reads them; poison messages go to the failed imports', async () => {
  await publish([
    // NServiceBus.RabbitMQ's MessageConverter.ValueToString: a table "k=v,k=v", an array "v;v",
    // a timestamp in NServiceBus' wire format, bytes as UTF-8 (invalid ones U+FFFD)
    { headers: { 'NServiceBus.MessageId': 'typed-1', nested: { a: 1, b: 'x', c: { d: true } }, list: ['p', 2, ['q', 'r']],
      stamp: { '!': 'timestamp', value: 1764460800 }, bad: Buffer.from([0xff, 0xfe, 0x41]), dec: { '!': 'decimal', value: { places: 2, digits: 150 } },
      dbl: { '!': 'double', value: 0.1 }, big: { '!': 'double', value: 1e20 }, yes: true, n: -7 }, body: 'p1' },
    { headers: { 'NServiceBus.MessageId': 'nul-1', nul: Buffer.from([0x41, 0x00, 0x42]) }, body: 'p2' },
    { headers: Object.fromEntries([['NServiceBus.MessageId', 'poison-many'], ...Array.from({ length: 1001 }, (_, i) => [`h${i}`, 'v'])]), body: 'p3' },
    { headers: { 'NServiceBus.MessageId': 'after-poison' }, body: 'fine' },
    { headers: { 'NServiceBus.EnclosedMessageTypes': 'X.NoId' }, body: 'no id', messageId: 'amqp-prop-id' },
    { headers: { 'NServiceBus.EnclosedMessageTypes': 'X.NoIdAtAll' }, body: 'derived' },
  ]);
  await waitFor(async () => (await http(d, 'GET', '/api/v1/messages/after-poison')).status === 200, 10000, 'next message stored');
  const typed = await http(d, 'GET', '/api/v1/messages/typed-1');
  assertEq(typed.status, 200, 'typed headers stored');
  const h = typed.json.headers;
  assertEq(h.nested, 'a=1,b=x,c=d=True', 'table');
  assertEq(h.list, 'p;2;q;r', 'array');
  assertEq(h.stamp, '2025-11-30 00:00:00:000000 Z', 'timestamp');
  assertEq(h.bad, '\uFFFD\uFFFDA', 'invalid UTF-8 replaced');
  assertEq(h.dec, '1.50', 'decimal');
  assertEq(h.dbl, '0.1', 'double');
  assertEq(h.big, '1E+20', 'double with an exponent');
  assertEq(h.yes, 'True', 'boolean');
  assertEq(h.n, '-7', 'integer');
  // a NUL cannot be kept in a header value: it becomes U+FFFD, and the message is kept
  assertEq((await http(d, 'GET', '/api/v1/messages/nul-1')).json.headers.nul, 'A\uFFFDB', 'NUL');
  const f = await http(d, 'GET', '/api/v1/journal/failed');
  assertEq(f.status, 200, 'failed list');
  assertEq(f.json.total, 1, `failed imports: ${f.text.slice(0, 400)}`);
  assert(/1002 headers: at most 1000/.test(f.json.failed[0].reason), `reason: ${f.json.failed[0].reason}`);
  assertEq(f.json.failed[0].source, `amqp-${QUEUE}`, 'source');
  // ServiceControl's id of a message without NServiceBus.MessageId: the GUID of the AMQP
  // message-id (MD5 read as a .NET Guid)
  const noId = await http(d, 'GET', '/api/v1/messages/0b679b68-089f-207f-23a4-194593816d0f');
  assertEq(noId.status, 200, 'the GUID of the AMQP message-id');
  assertEq(noId.json.id_derived, true, 'derived');
  const derived = await http(d, 'GET', '/api/v1/messages?type=X.NoIdAtAll');
  assertEq(derived.json.total, 1, 'message without any id');
  assertEq(derived.json.messages[0].id_derived, true, 'derived id');
  await waitFor(async () => (await queueDepth()) === 0 || await queueDepth(), 10000, 'queue drained');
  // (a body is sent: an empty POST body trips a core bug, see the journal's report)
  const r = await http(d, 'POST', `/api/v1/journal/failed/${f.json.failed[0].id}/reimport`, {});
  assertEq(r.status, 422, `too many headers still cannot be imported (${r.text.slice(0, 300)})`);
  assertEq((await http(d, 'GET', '/api/v1/journal/failed')).json.total, 1, 'the failed import stays');
  assertEq((await http(d, 'POST', '/api/v1/journal/failed/999999/reimport', {})).status, 404, 'unknown failed import');
});

await test('journal amqp: a large body is compressed and comes back intact', async () => {
  const big = Buffer.alloc(150000);
  for (let i = 0; i < big.length; i++) big[i] = (i * 7 + (i >> 9)) & 0xff;
  await publish([{ headers: { 'NServiceBus.MessageId': 'big-1', 'NServiceBus.ContentType': 'application/octet-stream' }, body: big }]);
  await waitFor(async () => (await http(d, 'GET', '/api/v1/messages/big-1')).status === 200, 10000, 'stored');
  const r = await fetch(`${d.url}/api/v1/messages/big-1/body`);
  assertEq(r.status, 200, 'body status');
  const got = Buffer.from(await r.arrayBuffer());
  assertEq(got.length, big.length, 'length');
  assert(got.equals(big), 'bytes differ');
  const m = await http(d, 'GET', '/api/v1/messages/big-1');
  assertEq(m.json.body.state, 'compressed', 'state');
});

await ch.close();
await conn.close();
await finish();

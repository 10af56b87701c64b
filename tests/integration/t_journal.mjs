// Journal over HTTP: POST /api/v1/messages answered 200 once durable, then search (full
// text, filters, sort, keyset paging with totals), detail, body (inline, compressed, over the
// maximum), conversation and endpoint views; bad input changes nothing; kill -9 keeps every
// acknowledged message; retention drops whole partitions while ingestion runs; the disk
// guard answers 507 and says so in status and metrics. docs/API.md "Journal".
import { join } from 'node:path';
import { readdirSync } from 'node:fs';
import { test, finish, assert, assertEq, sleep, failTest } from './lib/harness.mjs';
import { workDir, startOpsd, http, metrics, diag } from './lib/opsd.mjs';
import { nsbHeaders } from './lib/journal_rabbit.mjs';

const work = workDir('t_journal');
const dataDir = join(work.dir, 'data');
const journalCfg = (floor = '0') => `
journal:
  retention: 1h
  partition: 2s
  inline_max: 1000
  body_max: 100000
  disk_floor: ${floor}
`;
const config = (floor) => (port) => `server: {listen: 127.0.0.1:${port}, data_dir: ${dataDir}}\n${journalCfg(floor)}`;

let d;
try {
  d = await startOpsd(work, { config: config() });
} catch (e) {
  failTest('journal: opsd starts', e.message);
  work.keep = true;
  await finish();
}

const post = (dd, messages) => http(dd, 'POST', '/api/v1/messages', { messages });
const search = (dd, q = '') => http(dd, 'GET', `/api/v1/messages?${q}`);
const total = async (dd, q = '') => (await search(dd, `limit=1&${q}`)).json.total;
const BASE = Date.now() - 60000;
const msg = (i, extra = {}) => ({
  headers: { ...nsbHeaders(i, { endpoint: i % 3 ? 'Sales' : 'Billing', base: BASE }), ...extra },
  body: JSON.stringify({ order: i, note: `note${i}` }),
});

const N = 300;
await test('journal: a POSTed batch is durable, then found by search, filters and paging', async () => {
  const r = await post(d, Array.from({ length: N }, (_, i) => msg(i)));
  assertEq(r.status, 200, `post (${r.text.slice(0, 300)})`);
  assertEq(r.json, { accepted: N, stored: N, duplicates: 0, failed: 0 }, 'answer');
  const again = await post(d, [msg(5), msg(6)]);
  assertEq(again.json.duplicates, 2, 'a copy is recognised');
  assertEq(await total(d), N, 'total');
  assertEq(await total(d, 'endpoint=Billing'), N / 3, 'endpoint filter');
  assertEq(await total(d, 'conversation=conv-3'), N / 10, 'conversation filter');
  assertEq(await total(d, 'type=Shop.Messages.PlaceOrder'), N, 'type filter');
  assertEq(await total(d, 'q=note123'), 1, 'full text in the body');
  assertEq(await total(d, 'q=APP01%20Billing'), N / 3, 'full text in header values');
  assertEq(await total(d, `from=${Date.now() + 3600000}`), 0, 'time range');
  // Keyset paging, oldest first by time sent: every message once, in order.
  const ids = [];
  let cursor = '';
  for (let page = 0; page < 20; page++) {
    const p = await search(d, `sort=time_sent&direction=asc&limit=64${cursor ? `&cursor=${cursor}` : ''}`);
    assertEq(p.status, 200, 'page');
    assertEq(p.json.total, N, 'total on every page');
    ids.push(...p.json.messages.map((m) => m.id));
    if (!p.json.next) break;
    cursor = encodeURIComponent(p.json.next);
  }
  assertEq(ids.length, N, 'paged through all');
  assertEq(ids[0], 'msg-000000', 'first');
  assertEq(ids[N - 1], `msg-${String(N - 1).padStart(6, '0')}`, 'last');
  const crit = await search(d, 'sort=critical_time&limit=5');
  assertEq(crit.json.messages[0].critical_ms, 25, 'critical time');
  const conv = await http(d, 'GET', '/api/v1/conversations/conv-7');
  assertEq(conv.status, 200, 'conversation');
  assertEq(conv.json.messages.length, N / 10, 'conversation size');
  assertEq((await http(d, 'GET', '/api/v1/conversations/none')).status, 404, 'unknown conversation');
  const eps = await http(d, 'GET', '/api/v1/journal/endpoints');
  const sales = eps.json.endpoints.find((e) => e.name === 'Sales');
  assertEq(sales.received, N - N / 3, 'endpoint count');
  assertEq(sales.processing_ms.avg, 20, 'endpoint processing time');
  assertEq(eps.json.endpoints.find((e) => e.name === 'ClientUI').sent, N, 'sending endpoint');
});

// Filters on endpoint and type, counts and sorts by time sent, processing and critical time
// (partition format 3: combos and indexes) against what the messages sent say: every page, in
// order (ties by partition, then arrival), with the total on each.
await test('journal: filtered and sorted pages agree with the messages sent', async () => {
  const B2 = Date.now() - 120000;
  const iso = (ms) => new Date(ms).toISOString();
  const M = 240;
  const sent = [];
  const msgs = Array.from({ length: M }, (_, i) => {
    const ts = B2 + i * 100, st = ts + (i * 37) % 200, en = st + ((i * 7919) % 13) * 10;
    const h = { ...nsbHeaders(700000 + i, { endpoint: ['IxA', 'IxB', 'IxC', 'IxD'][i % 4], base: B2 }) };
    h['NServiceBus.OriginatingEndpoint'] = ['IxS', 'IxA', 'IxT'][i % 3];
    h['NServiceBus.EnclosedMessageTypes'] = `Ix.T${i % 5}, Ix`;
    h['NServiceBus.ProcessingStarted'] = iso(st);
    h['NServiceBus.ProcessingEnded'] = iso(en);
    if (i % 23) h['NServiceBus.TimeSent'] = iso(ts); else delete h['NServiceBus.TimeSent'];
    sent.push({ i, id: h['NServiceBus.MessageId'], recv: h['NServiceBus.ProcessingEndpoint'], send: h['NServiceBus.OriginatingEndpoint'],
      type: `Ix.T${i % 5}`, time_sent: i % 23 ? ts : -1, processing_ms: en - st, critical_ms: i % 23 ? en - ts : -1, at: en,
      part: Math.floor(en / 2000) });
    return { headers: h, body: `{"i":${i}}` };
  });
  const r = await post(d, msgs);
  assertEq(r.status, 200, `post (${r.text.slice(0, 300)})`);
  assertEq(r.json.stored, M, 'stored');
  const keyOf = { time_sent: 'time_sent', processing_time: 'processing_ms', critical_time: 'critical_ms' };
  let checked = 0;
  for (const [endpoint, type] of [['IxA', 'Ix.T2'], ['IxA', ''], ['IxD', ''], ['', 'Ix.T0'], ['IxT', 'Ix.T4']]) {
    for (const sort of Object.keys(keyOf)) {
      for (const dir of ['asc', 'desc']) {
        for (const range of [null, [B2 + 5000, B2 + 15000]]) {
          const k = keyOf[sort];
          const want = sent.filter((m) => (!endpoint || m.recv === endpoint || m.send === endpoint) && (!type || m.type === type) &&
            (!range || (m.at >= range[0] && m.at <= range[1])))
            .sort((a, b) => (a[k] - b[k]) || (a.part - b.part) || (a.i - b.i));
          if (dir === 'desc') want.reverse();
          const q = `sort=${sort}&direction=${dir}&limit=7${endpoint ? `&endpoint=${endpoint}` : ''}${type ? `&type=${type}` : ''}` +
            (range ? `&from=${range[0]}&to=${range[1]}` : '');
          const got = [];
          let cursor = '';
          for (let page = 0; page < 60; page++) {
            const p = await search(d, `${q}${cursor ? `&cursor=${cursor}` : ''}`);
            assertEq(p.status, 200, `${q}: status`);
            assertEq(p.json.total, want.length, `${q}: total`);
            got.push(...p.json.messages.map((m) => m.id));
            if (!p.json.next) break;
            cursor = encodeURIComponent(p.json.next);
          }
          assertEq(got, want.map((m) => m.id), `${q}: pages`);
          checked += want.length > 0;
        }
      }
    }
  }
  assert(checked >= 50, `searches with results: ${checked}`);
});

await test('journal: bodies inline, compressed, and over the maximum', async () => {
  const big = 'x'.repeat(50000) + 'end';
  const bin = Buffer.from(Array.from({ length: 3000 }, (_, i) => (i * 31) & 0xff));
  const huge = 'y'.repeat(150000);
  const r = await post(d, [
    { headers: { 'NServiceBus.MessageId': 'b-big', 'NServiceBus.ContentType': 'text/plain' }, body: big },
    { headers: { 'NServiceBus.MessageId': 'b-bin' }, body: bin.toString('base64'), body_encoding: 'base64' },
    { headers: { 'NServiceBus.MessageId': 'b-huge', 'NServiceBus.ContentType': 'text/plain' }, body: huge },
    { headers: { 'NServiceBus.MessageId': 'b-none' } },
  ]);
  assertEq(r.status, 200, `post (${r.text.slice(0, 200)})`);
  let b = await fetch(`${d.url}/api/v1/messages/b-big/body`);
  assertEq(b.status, 200, 'big');
  assertEq(await b.text(), big, 'big body intact');
  b = await fetch(`${d.url}/api/v1/messages/b-bin/body`);
  assert(Buffer.from(await b.arrayBuffer()).equals(bin), 'binary body intact');
  const h = await http(d, 'GET', '/api/v1/messages/b-huge/body');
  assertEq(h.status, 404, 'huge');
  assertEq(h.json.error.code, 'body_not_stored', 'code');
  const hm = await http(d, 'GET', '/api/v1/messages/b-huge');
  assertEq(hm.json.body.state, 'not_stored', 'state');
  assertEq(hm.json.body.size, 150000, 'size kept');
  assertEq(hm.json.body.hash.length, 64, 'hash kept');
  assertEq((await http(d, 'GET', '/api/v1/messages/b-big')).json.body.state, 'compressed', 'big state');
  assertEq((await http(d, 'GET', '/api/v1/messages/b-none/body')).status, 200, 'empty body');
  assertEq((await http(d, 'GET', '/api/v1/messages/nope')).status, 404, 'unknown message');
  assertEq((await http(d, 'GET', '/api/v1/messages/nope/body')).status, 404, 'unknown body');
});

await test('journal: bad input is refused whole and changes nothing', async () => {
  const before = await total(d);
  const bad = [
    ['not json', '{"messages":['],
    ['not a batch', { messages: 'x' }],
    ['empty batch', { messages: [] }],
    ['header not a string', { messages: [msg(9001), { headers: { a: 1 } }] }],
    ['unknown key', { messages: [{ headers: {}, bogus: 1 }] }],
    ['bad base64', { messages: [msg(9002), { headers: {}, body: '@@@', body_encoding: 'base64' }] }],
    ['bad encoding', { messages: [{ headers: {}, body: 'x', body_encoding: 'utf16' }] }],
    ['headers not an object', { messages: [{ headers: [1] }] }],
    ['duplicate keys', '{"messages":[{"headers":{"a":"1","a":"2"}}]}'],
    ['NUL in a value', '{"messages":[{"headers":{"a":"x\\u0000y"}}]}'],
    ['invalid UTF-8', Buffer.from([...Buffer.from('{"messages":[{"headers":{"a":"'), 0xff, 0xfe, ...Buffer.from('"}}]}')])],
    ['too many headers', { messages: [{ headers: Object.fromEntries(Array.from({ length: 1001 }, (_, i) => [`h${i}`, 'v'])) }] }],
    ['empty header name', { messages: [{ headers: { '': 'v' } }] }],
  ];
  for (const [what, body] of bad) {
    const r = await fetch(`${d.url}/api/v1/messages`, { method: 'POST', body: typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body) });
    const t = await r.text();
    assertEq(r.status, 400, `${what} (${t.slice(0, 200)})`);
    assert(JSON.parse(t).error.message.length > 10, `${what}: a reason`);
  }
  assertEq(await total(d), before, 'nothing stored');
  assertEq((await search(d, 'limit=0')).status, 400, 'limit 0');
  assertEq((await search(d, 'sort=size')).status, 400, 'bad sort');
  assertEq((await search(d, 'cursor=1.2')).status, 400, 'bad cursor');
  assertEq((await search(d, 'from=yesterday')).status, 400, 'bad time');
  assertEq((await search(d, 'q=%22%20OR%20(%20NEAR')).status, 200, 'search words are quoted, never a syntax error');
  assertEq((await http(d, 'PUT', '/api/v1/messages', {})).status, 405, 'method');
  assertEq((await http(d, 'GET', '/api/v1/messages/a/b/c')).status, 404, 'path');
});

// Every tenth message of the kill -9 test has a body over body_file_min (16 KB by default):
// kept in the partition's body file, which must hold every acknowledged one after the kill.
const bigBody = (i) => JSON.stringify({ order: i, pad: `${i}-`.repeat(4000).slice(0, 20000) });
const killMsg = (i) => (i % 10 ? msg(i) : { ...msg(i), body: bigBody(i) });

await test('journal: kill -9 keeps every acknowledged message; restart keeps everything', async () => {
  const before = await total(d);
  const acked = [];
  let stop = false;
  const poster = (async () => {
    for (let k = 0; !stop; k++) {
      const batch = Array.from({ length: 50 }, (_, i) => killMsg(20000 + k * 50 + i));
      try {
        const r = await post(d, batch);
        if (r.status === 200) acked.push(...batch.map((m) => m.headers['NServiceBus.MessageId']));
      } catch { break; }
    }
  })();
  await sleep(700);
  d.proc.kill('SIGKILL');
  stop = true;
  await poster;
  await d.exited;
  assert(acked.length > 0, 'something was acknowledged');
  d = await startOpsd(work, { config: config() });
  const after = await total(d);
  assert(after >= before + acked.length, `after restart ${after} < ${before} + ${acked.length}`);
  for (const id of [acked[0], acked[acked.length - 1]]) assertEq((await http(d, 'GET', `/api/v1/messages/${id}`)).status, 200, id);
  const big = acked.filter((id) => Number(id.split('-').pop()) % 10 === 0);
  assert(big.length > 0, 'large bodies were acknowledged');
  for (const id of big) {
    const b = await http(d, 'GET', `/api/v1/messages/${id}/body`);
    assertEq(b.status, 200, `body of ${id}`);
    assertEq(b.text, bigBody(Number(id.split('-').pop())), `body of ${id} as sent`);
  }
  diag(`${big.length} bodies in the body file read back as sent`);
  const ok = await search(d, `limit=1000&conversation=conv-0&sort=time_sent`);
  assertEq(ok.status, 200, 'search after restart');
  diag(`${acked.length} acknowledged before kill -9, ${after - before} stored`);
  // A clean restart keeps everything too.
  await d.stop('SIGTERM');
  d = await startOpsd(work, { config: config() });
  assertEq(await total(d), after, 'after SIGTERM and restart');
});

await test('journal: retention drops whole partitions while ingestion runs', async () => {
  // Processed 1 h minus 3 s ago: inside the retention, in a partition that expires in seconds.
  const old = Date.now() - 3600000 + 3000;
  const headers = { ...nsbHeaders(1, { base: old - 25 }), 'NServiceBus.MessageId': 'old-1' };
  assertEq((await post(d, [{ headers, body: 'old' }])).status, 200, 'post old');
  assertEq((await http(d, 'GET', '/api/v1/messages/old-1')).status, 200, 'old is there');
  const parts = (await http(d, 'GET', '/api/v1/journal/partitions')).json.partitions;
  assert(parts.every((p) => p.messages > 0 && p.bytes >= 4096), `every partition has messages and bytes: ${JSON.stringify(parts)}`);
  assert(parts.some((p) => p.end <= Date.now() - 3600000 + 6000), `an old partition: ${JSON.stringify(parts)}`);
  const before = await total(d);
  let gone = false;
  for (let k = 0; k < 40 && !gone; k++) {
    assertEq((await post(d, [msg(50000 + k)])).status, 200, 'ingestion goes on');
    await sleep(250);
    gone = (await http(d, 'GET', '/api/v1/messages/old-1')).status === 404;
  }
  assert(gone, 'the old message is gone');
  const m = await metrics(d);
  assert(m.get('opsd_journal_partitions_dropped_total') >= 1, 'dropped metric');
  const files = readdirSync(join(dataDir, 'journal')).filter((f) => /^p-\d+\.db$/.test(f));
  assert(files.every((f) => Number(f.slice(2, -3)) + 2000 > Date.now() - 3600000 - 2000), `old files gone: ${files}`);
  assert((await total(d)) >= before - 1, 'nothing else dropped');
});

await test('journal: below the disk floor ingestion stops with 507, and resumes', async () => {
  const { writeFileSync } = await import('node:fs');
  writeFileSync(d.configPath, config('1000000GB')(d.port));
  let r;
  for (let k = 0; k < 40; k++) {
    await sleep(250);
    r = await post(d, [msg(60000 + k)]);
    if (r.status === 507) break;
  }
  assertEq(r.status, 507, `refused (${r.text.slice(0, 200)})`);
  assertEq(r.json.error.code, 'insufficient_storage', 'code');
  const st = await http(d, 'GET', '/api/v1/status');
  assertEq(st.json.journal.state, 'paused: disk below the floor', 'status');
  assertEq((await metrics(d)).get('opsd_journal_paused{reason="disk_floor"}'), 1, 'metric');
  const h = await http(d, 'GET', '/healthz');
  assertEq(h.json, { status: 'degraded', journal: 'paused: disk below the floor' }, 'health');
  writeFileSync(d.configPath, config()(d.port));
  for (let k = 0; k < 40; k++) {
    await sleep(250);
    r = await post(d, [msg(61000 + k)]);
    if (r.status === 200) break;
  }
  assertEq(r.status, 200, 'resumed');
});

await finish();

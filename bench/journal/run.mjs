// bench/journal: J1-J4 of ../shared/SEEDS.md against a real opsd and a private RabbitMQ.
//
//   node bench/journal/run.mjs BUILD_DIR [--soak MINUTES] [--amqp N] [--http N]
//        [--only-j1 | --only-j2 | --only-j3] [--compress-min BYTES] [--compress-level N]
//        [--j2-mb MB] [--j2-conns N] [--j2-sizes 13,20,40,66,93,133] [--body-file-min BYTES]
//
// Prints msg/s ingested durably (AMQP: from a pre-filled queue until every delivery is
// acknowledged; HTTP: batches answered 200), bytes on disk per message, opsd CPU and RSS,
// search latencies, the expiry cost per message (retention dropping partitions while
// ingestion runs) and an RSS soak. Run it with a Release build (-DCMAKE_BUILD_TYPE=Release).
// Needs tests/integration/node_modules (amqplib) and Debian's rabbitmq-server.
// The HTTP loads whose bodies are built before the clock starts are sent by bench_http_post
// (bench/journal/post_tool.mjs) when it is built next to opsd (-DOPSD_BENCH=ON).
import { readFileSync, readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { workDir, startOpsd, http, metrics } from '../../tests/integration/lib/opsd.mjs';
import { startRabbit, amqp, nsbHeaders } from '../../tests/integration/lib/journal_rabbit.mjs';
import { finish, sleep } from '../../tests/integration/lib/harness.mjs';
import { postTool, writeBodies, postFile } from './post_tool.mjs';

const args = process.argv.slice(2);
const opt = (name, dflt) => { const i = args.indexOf(name); return i >= 0 ? Number(args[i + 1]) : dflt; };
process.env.OPSD = resolve(args[0] || 'build-rel', 'opsd');
const SOAK_MIN = opt('--soak', 2);
const AMQP_N = opt('--amqp', 100000);
const HTTP_N = opt('--http', 200000);
const ONLY_J3 = args.includes('--only-j3');
const ONLY_J1 = args.includes('--only-j1'); // J1 only (AMQP and HTTP): for before/after runs
const ONLY_J2 = args.includes('--only-j2'); // J2 and the searches only
const J1 = !ONLY_J3 && !ONLY_J2, J2 = !ONLY_J3 && !ONLY_J1, J3 = !ONLY_J1 && !ONLY_J2;
const J4 = J1 && J2 && J3;
const COMPRESS_MIN = opt('--compress-min', 0); // the journal's compress_min (0, its default: inline bodies as they are)
const COMPRESS_LEVEL = opt('--compress-level', 1); // the journal's compress_level (zstd level)
const BODY_FILE_MIN = opt('--body-file-min', 16384); // the journal's body_file_min (0: bodies in SQLite rows)
const J2_MB = opt('--j2-mb', 1500); // MB of bodies sent per J2 size (150 was under a second at 66 KB)
const J2_CONNS = opt('--j2-conns', 8); // J2's concurrent connections, 20 messages a request
const J2_SIZES = args.includes('--j2-sizes') ? args[args.indexOf('--j2-sizes') + 1].split(',').map(Number)
  : [13, 20, 40, 66, 93, 133]; // KB
const TOOL = postTool(process.env.OPSD);

const work = workDir('bench_journal');
const rabbit = await startRabbit(work, { timeoutMs: 120000 });
process.on('uncaughtException', async (e) => { console.error(e); await finish(); });
process.on('unhandledRejection', async (e) => { console.error(e); await finish(); });
const config = (port, dataDir) => `
server: {listen: 127.0.0.1:${port}, data_dir: ${dataDir}}
journal:
  retention: 1h
  partition: 5s
  inline_max: 85000
  body_max: 102400
  compress_min: ${COMPRESS_MIN}
  compress_level: ${COMPRESS_LEVEL}
  body_file_min: ${BODY_FILE_MIN}
  disk_floor: 0
  queue_max: 2000000
  breaker: {failures: 1000000}
  amqp: {host: 127.0.0.1, port: ${rabbit.port}, queue: audit, prefetch: 5000}
`;

function cpuSeconds(pid) {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;
}
// CPU seconds of opsd's main (loop) thread and of the journal writer thread.
function threadCpu(pid) {
  const o = { loop: 0, writer: 0 };
  for (const t of readdirSync(`/proc/${pid}/task`)) {
    try {
      const raw = readFileSync(`/proc/${pid}/task/${t}/stat`, 'utf8');
      const name = raw.slice(raw.indexOf('(') + 1, raw.lastIndexOf(')'));
      const f = raw.slice(raw.lastIndexOf(')') + 2).split(' ');
      const v = (Number(f[11]) + Number(f[12])) / 100;
      if (String(pid) === t) o.loop += v;
      else if (name === 'jnl-writer') o.writer += v;
    } catch { /* the thread ended */ }
  }
  return o;
}
const fmt = (x, d = 0) => x.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d });
const rows = [];
const row = (...c) => { rows.push(c); console.log(c.join(' | ')); };

// Fill the queue before opsd consumes, so the figure is opsd's, not the publisher's.
const conn = await amqp.connect(rabbit.url);
const ch = await conn.createConfirmChannel();
const BASE = Date.now() - 60000;
async function fill(queue, n) {
  await ch.assertQueue(queue, { durable: true });
  for (let i = 0; i < n; i++) {
    ch.sendToQueue(queue, Buffer.from(`{"orderId":${i},"item":"widget"}`), { persistent: true, headers: nsbHeaders(i, { base: BASE }) });
    if (i % 5000 === 4999) await ch.waitForConfirms();
  }
  await ch.waitForConfirms();
}
// The broker's own ceiling, side by side: the same messages drained by a plain amqplib
// consumer that stores nothing (same prefetch, one ack per 1,000).
let brokerRate = 0;
if (J1) {
  await fill('ceiling', AMQP_N);
  const c2 = await conn.createChannel();
  await c2.prefetch(5000);
  const t0 = Date.now();
  let got = 0;
  await new Promise((res) => c2.consume('ceiling', (m) => {
    got++;
    if (got % 1000 === 0 || got === AMQP_N) c2.ack(m, true);
    if (got === AMQP_N) res();
  }));
  brokerRate = AMQP_N / ((Date.now() - t0) / 1000);
  await c2.close();
}
await fill('audit', J1 ? AMQP_N : 0);

const d = await startOpsd(work, { config });
// The store's size in /metrics is refreshed once a second by the writer: read it after that.
async function settledMetrics() { await sleep(1100); return metrics(d); }
row('test', 'messages', 'msg/s', 'bytes on disk/msg', 'opsd CPU s', 'RSS MiB');

// J1 AMQP
if (J1) {
  const c0 = cpuSeconds(d.pid);
  const t0 = Date.now();
  let acked = 0;
  let rss = 0;
  while (acked < AMQP_N) {
    await sleep(100);
    acked = (await metrics(d)).get('opsd_journal_amqp_acked_total') || 0;
    rss = Math.max(rss, d.rssKiB());
  }
  const s = (Date.now() - t0) / 1000;
  const m = await settledMetrics();
  row('J1 AMQP small (≈60 B body, 14 headers)', fmt(AMQP_N), fmt(AMQP_N / s), fmt(m.get('opsd_journal_store_bytes') / m.get('opsd_journal_stored_total')),
    fmt(cpuSeconds(d.pid) - c0, 1), fmt(rss / 1024));
  row('J1 AMQP: the broker alone (amqplib consumer, stores nothing)', fmt(AMQP_N), fmt(brokerRate), '', '', '');
}

// Request bodies are built before the clock starts when `prebuild` (the client's JSON work
// is then not on the machine while opsd is measured).
async function httpLoad(n, batch, conc, mk, prebuild = false) {
  const build = (first) => {
    const msgs = [];
    for (let i = first; i < Math.min(first + batch, n); i++) msgs.push(mk(i));
    return JSON.stringify({ messages: msgs });
  };
  const pre = [];
  if (prebuild) for (let first = 0; first < n; first += batch) pre.push(build(first));
  let next = 0;
  let rss = 0;
  const file = prebuild && TOOL ? writeBodies(pre, work.dir) : null;
  const c0 = cpuSeconds(d.pid);
  const th0 = threadCpu(d.pid);
  const t0 = Date.now();
  if (file) { // sent from C: node's fetch costs more CPU than opsd at large bodies
    const timer = setInterval(() => { rss = Math.max(rss, d.rssKiB()); }, 100);
    await postFile(TOOL, d.url, '/api/v1/messages', file, conc);
    clearInterval(timer);
    rss = Math.max(rss, d.rssKiB());
    next = n;
  }
  const worker = async () => {
    for (;;) {
      const first = next;
      if (first >= n) return;
      next += batch;
      const payload = prebuild ? pre[first / batch] : build(first);
      for (let attempt = 0; ; attempt++) {
        try { // a kept-alive connection the server closed meanwhile: send again (copies are recognised)
          const r = await fetch(`${d.url}/api/v1/messages`, { method: 'POST', body: payload });
          if (r.status !== 200) throw new Error(`POST ${r.status}: ${(await r.text()).slice(0, 200)}`);
          await r.arrayBuffer();
          break;
        } catch (e) {
          if (attempt >= 3 || !/fetch failed/.test(e.message)) throw e;
        }
      }
      rss = Math.max(rss, d.rssKiB());
    }
  };
  await Promise.all(Array.from({ length: conc }, worker));
  const th1 = threadCpu(d.pid);
  return { s: (Date.now() - t0) / 1000, cpu: cpuSeconds(d.pid) - c0, rss,
           loop: th1.loop - th0.loop, writer: th1.writer - th0.writer };
}

// J1 HTTP
if (J1) {
  const before = await settledMetrics();
  const r = await httpLoad(HTTP_N, 1000, 8, (i) => ({ headers: nsbHeaders(1000000 + i, { base: BASE }), body: `{"orderId":${i},"item":"widget"}` }), true);
  const m = await settledMetrics();
  row(`J1 HTTP small (batches of 1000, 8 clients): ${fmt(r.cpu * 1e6 / HTTP_N, 1)} µs of opsd CPU/msg (loop ${fmt(r.loop * 1e6 / HTTP_N, 1)}, writer ${fmt(r.writer * 1e6 / HTTP_N, 1)})`, fmt(HTTP_N), fmt(HTTP_N / r.s),
    fmt((m.get('opsd_journal_store_bytes') - before.get('opsd_journal_store_bytes')) / HTTP_N), fmt(r.cpu, 1), fmt(r.rss / 1024));
}

// J2 body sizes: JSON-like text (compresses about as well as real payloads, 3-5x)
const words = ['order', 'customer', 'widget', 'quantity', 'price', 'shipping', 'address', 'street', 'city', 'total'];
function body(kb, seed) {
  let s = '{"items":[';
  let x = seed * 2654435761 >>> 0;
  while (s.length < kb * 1000 - 40) {
    x = (x * 1103515245 + 12345) >>> 0;
    s += `{"${words[x % 10]}":"${words[(x >> 8) % 10]}-${x % 100000}","n":${x % 997}},`;
  }
  return s.slice(0, kb * 1000 - 2) + ']}';
}
for (const kb of J2 ? J2_SIZES : []) {
  const n = Math.max(1000, Math.floor(J2_MB * 1000 / kb));
  const before = await settledMetrics();
  const bodies = Array.from({ length: 16 }, (_, k) => body(kb, k));
  const r = await httpLoad(n, 20, J2_CONNS, (i) => ({ headers: nsbHeaders(2000000 + kb * 100000 + i, { base: BASE }), body: bodies[i % 16] }), true);
  const m = await settledMetrics();
  row(`J2 HTTP ${kb} KB bodies (${J2_CONNS} clients): ${fmt(r.cpu * 1e6 / n)} µs of opsd CPU/msg (loop ${fmt(r.loop * 1e6 / n)}, writer ${fmt(r.writer * 1e6 / n)})`, fmt(n), fmt(n / r.s), fmt((m.get('opsd_journal_store_bytes') - before.get('opsd_journal_store_bytes')) / n),
    fmt(r.cpu, 1), fmt(r.rss / 1024));
}

// Search latencies (median of 15) over everything stored so far
if (J2) {
const total = (await http(d, 'GET', '/api/v1/messages?limit=1')).json.total;
console.log(`\nsearch over ${fmt(total)} messages in ${(await http(d, 'GET', '/api/v1/journal/partitions')).json.partitions.length} partitions: median ms`);
async function lat(what, path) {
  const t = [];
  for (let k = 0; k < 15; k++) {
    const t0 = performance.now();
    const r = await fetch(`${d.url}${path}`);
    await r.arrayBuffer();
    if (r.status !== 200) throw new Error(`${what}: ${r.status}`);
    t.push(performance.now() - t0);
  }
  t.sort((a, b) => a - b);
  row(`search: ${what}`, '', '', '', '', fmt(t[7], 1) + ' ms');
}
await lat('newest 50, with total', '/api/v1/messages?limit=50');
await lat('full text (one word in a body)', '/api/v1/messages?q=widget-12345&limit=50');
await lat('endpoint + type filter', '/api/v1/messages?endpoint=Sales&type=Shop.Messages.PlaceOrder&limit=50');
await lat('sort by critical time', '/api/v1/messages?sort=critical_time&limit=50');
await lat('conversation view (≈1/10 of J1 messages)', '/api/v1/conversations/conv-3?x=1');
const kb0 = J2_SIZES.includes(66) ? 66 : J2_SIZES[0];
await lat('one message with headers', `/api/v1/messages/msg-${2000000 + J2_SIZES[0] * 100000 + 42}`);
await lat(`a ${kb0} KB body`, `/api/v1/messages/msg-${String(2000000 + kb0 * 100000 + 5).padStart(6, '0')}/body`);
}

// J3 (scaled down in time): messages processed just inside the 1 h retention land in
// partitions that expire while ingestion goes on; cost per expired message.
if (J3) {
  const EXP = 50000;
  const before = await metrics(d);
  // processed 1 h - 40 s before it is sent: inside the retention when it arrives, expired
  // about 40 s later (partition 5 s). On a loaded machine a message that reached the writer
  // more than 40 s after it was made would be refused as outside the retention (a failed
  // import) and never stored, and the step would drop nothing: the stored count is checked.
  await httpLoad(EXP, 1000, 4, (i) => ({ headers: nsbHeaders(9000000 + i, { base: Date.now() - 3600000 + 40000 - 25 - (9000000 + i) }), body: 'x' }));
  const t0 = Date.now();
  const stored = (await metrics(d)).get('opsd_journal_stored_total') - before.get('opsd_journal_stored_total');
  if (stored < EXP) console.log(`J3 expiry: only ${fmt(stored)} of ${fmt(EXP)} messages stored (the others arrived past the retention)`);
  let m;
  let k = 0;
  const live = (async () => { // ingestion goes on meanwhile
    while (Date.now() - t0 < 30000) {
      await httpLoad(1000, 500, 2, (i) => ({ headers: nsbHeaders(9500000 + k * 1000 + i, { base: BASE }), body: 'y' }));
      k++;
    }
  })();
  for (;;) {
    await sleep(500);
    m = await metrics(d);
    const gone = (await http(d, 'GET', `/api/v1/messages/msg-${9000000 + EXP - 1}`)).status === 404;
    if (gone || Date.now() - t0 > 90000) break;
  }
  await live;
  const secs = m.get('opsd_journal_retention_seconds_total') - before.get('opsd_journal_retention_seconds_total');
  const parts = m.get('opsd_journal_partitions_dropped_total') - before.get('opsd_journal_partitions_dropped_total');
  row(`J3 expiry: ${fmt(EXP)} messages in ${parts} partitions dropped${parts ? '' : ' (none within 90 s)'}`, '', '', '', '', `${fmt(secs * 1e6 / EXP, 2)} µs/msg`);
}

// J4 soak: steady HTTP load, RSS sampled every 10 s
if (J4) {
  console.log(`\nsoak ${SOAK_MIN} min`);
  const end = Date.now() + SOAK_MIN * 60000;
  const samples = [];
  let n = 0;
  let nextSample = Date.now();
  while (Date.now() < end) {
    await httpLoad(2000, 500, 4, (i) => ({ headers: nsbHeaders(20000000 + n + i, { base: BASE }), body: body(5, i % 16) }));
    n += 2000;
    if (Date.now() >= nextSample) {
      samples.push(Math.round(d.rssKiB() / 1024));
      nextSample += 10000;
    }
  }
  row(`J4 soak ${SOAK_MIN} min, 5 KB bodies`, fmt(n), fmt(n / (SOAK_MIN * 60)), '', '', `RSS MiB every 10 s: ${samples.join(' ')}`);
}

console.log('\n| test | messages | msg/s | bytes on disk/msg | opsd CPU s | RSS MiB / latency |\n| --- | --- | --- | --- | --- | --- |');
for (const r of rows.slice(1)) console.log(`| ${r.join(' | ')} |`);
await ch.close();
await conn.close();
await finish();

// bench/journal/grow.mjs: J3 of ../shared/SEEDS.md, retention with a growing store. Ingests
// over HTTP at the highest rate opsd takes while the store grows to --gb GB, then keeps going
// while retention drops the oldest partitions; prints, every --every seconds, the ingestion
// rate, the store's size, the partitions dropped and the expiry cost per expired message.
//
//   node bench/journal/grow.mjs BUILD_DIR [--gb 20] [--kb 10] [--hold-min 12]
//        [--partition-s 60] [--minutes 15] [--conns 8] [--batch 50] [--every 30] [--rate N]
//
// With --rate N (messages/s in all) it is the J4 soak: a steady load for --minutes with
// retention running, RSS printed every --every seconds (e.g. --minutes 60 --every 60).
//
// The seed's retentions (30 min, 6 h, 3 days) are scaled down in time, not in rate: the
// journal keeps 1 h (its shortest retention) and the messages are stamped 60 - --hold-min
// minutes in the past, so each expires --hold-min minutes after it arrives, and at the full
// rate the store holds about --gb GB (the size the seed's service reached with 30 min). The
// load is bench_http_post --gen (C, built with -DOPSD_BENCH=ON next to opsd): new messages
// with NServiceBus headers and JSON bodies of --kb KB. The figures to look at: msg/s from the first interval to the last
// (flat: ingestion does not slow as the store grows) and µs of expiry per expired message
// (flat: dropping a partition costs the same whatever the store's size).
import { readFileSync } from 'node:fs';
import { resolve, join } from 'node:path';
import { spawn } from 'node:child_process';
import { workDir, startOpsd, http, metrics } from '../../tests/integration/lib/opsd.mjs';
import { finish, sleep } from '../../tests/integration/lib/harness.mjs';

const args = process.argv.slice(2);
const opt = (name, dflt) => { const i = args.indexOf(name); return i >= 0 ? Number(args[i + 1]) : dflt; };
process.env.OPSD = resolve(args[0] || 'build-bench', 'opsd');
const GB = opt('--gb', 20);
const KB = opt('--kb', 10);
const HOLD_MIN = opt('--hold-min', 12);
const PART_S = opt('--partition-s', 60);
const MINUTES = opt('--minutes', 15);
const CONNS = opt('--conns', 8);
const BATCH = opt('--batch', 50);
const EVERY = opt('--every', 30);
const RATE = opt('--rate', 0);
const TOOL = process.env.BENCH_POST_TOOL || join(process.env.OPSD, '..', 'bench', 'bench_http_post');

const work = workDir('bench_journal_grow');
const config = (port, dataDir) => `
server: {listen: 127.0.0.1:${port}, data_dir: ${dataDir}}
journal:
  retention: 1h
  partition: ${PART_S}s
  inline_max: 85000
  body_max: 102400
  disk_floor: 0
  queue_max: 2000000
  breaker: {failures: 1000000}
`;
const d = await startOpsd(work, { config });
const fmt = (x, dd = 0) => x.toLocaleString('en-US', { maximumFractionDigits: dd, minimumFractionDigits: dd });
const loadavg = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
function cpuSeconds(pid) {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;
}
async function partitions() {
  const r = await http(d, 'GET', '/api/v1/journal/partitions');
  return new Map(r.json.partitions.map((p) => [p.start, p.messages]));
}

console.log(`J3 grow: ${KB} KB bodies, kept ${HOLD_MIN} min (retention 1 h, stamped ${60 - HOLD_MIN} min ago), partitions of ${PART_S} s, ${MINUTES} min, ` +
  `${CONNS} connections x ${BATCH} messages per request, ${RATE ? `at most ${RATE} msg/s` : 'as fast as answered'}, ` +
  `target ${GB} GB; load ${loadavg()}`);
const u = new URL(d.url);
const tool = spawn(TOOL, [u.hostname, u.port, '/api/v1/messages', '--gen', String(KB), String(BATCH),
  String(MINUTES * 60), '1', String(CONNS), String((60 - HOLD_MIN) * 60000), String(RATE)], { stdio: ['ignore', 'pipe', 'inherit'] });
let toolOut = '';
tool.stdout.on('data', (b) => { toolOut += b; });
const toolDone = new Promise((res) => tool.on('exit', res));

const rows = [];
let prev = { t: Date.now(), m: await metrics(d), cpu: cpuSeconds(d.pid), parts: await partitions() };
const t0 = prev.t;
let peakGB = 0;
let running = true;
toolDone.then(() => { running = false; });
while (running) {
  await Promise.race([sleep(EVERY * 1000), toolDone]);
  const now = { t: Date.now(), m: await metrics(d), cpu: cpuSeconds(d.pid), parts: await partitions() };
  const s = (now.t - prev.t) / 1000;
  const stored = now.m.get('opsd_journal_stored_total') - prev.m.get('opsd_journal_stored_total');
  const dropped = now.m.get('opsd_journal_partitions_dropped_total') - prev.m.get('opsd_journal_partitions_dropped_total');
  const retS = now.m.get('opsd_journal_retention_seconds_total') - prev.m.get('opsd_journal_retention_seconds_total');
  let expired = 0;
  for (const [start, n] of prev.parts) if (!now.parts.has(start)) expired += n;
  const gb = now.m.get('opsd_journal_store_bytes') / 1e9;
  peakGB = Math.max(peakGB, gb);
  const row = [fmt((now.t - t0) / 1000), fmt(stored / s), fmt(gb, 2), String(now.parts.size), String(dropped),
    fmt(expired), expired ? fmt(retS * 1e6 / expired, 2) : '', fmt((now.cpu - prev.cpu) * 100 / s),
    fmt(d.rssKiB() / 1024), loadavg()];
  rows.push(row);
  console.log(row.join(' | '));
  prev = now;
}
const res = JSON.parse(toolOut.trim().split('\n').pop() || '{}');
console.log(`\n| t s | msg/s stored | store GB | partitions | dropped | messages expired | expiry µs/msg | opsd CPU % | RSS MiB | load |`);
console.log('| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |');
for (const r of rows) console.log(`| ${r.join(' | ')} |`);
console.log(`\nsent ${fmt(res.messages || 0)} messages in ${res.seconds} s (client CPU ${res.client_cpu_s} s); ` +
  `store peaked at ${fmt(peakGB, 2)} GB${peakGB < GB ? ` (under the ${GB} GB asked: raise --hold-min)` : ''}`);
await finish();

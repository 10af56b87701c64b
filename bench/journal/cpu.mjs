// bench/journal/cpu.mjs: opsd CPU per message and search latencies on one large partition,
// without the broker (HTTP only), for before/after comparisons on a shared machine.
//
//   node bench/journal/cpu.mjs BUILD_DIR [--small N] [--big N] [--kb 66] [--no-search]
//
// 1. --small N small messages (14 NServiceBus headers) over HTTP, batches of 1,000, 8 clients,
//    request bodies built before the clock starts: msg/s and opsd CPU µs per message (utime +
//    stime from /proc: the whole process, the loop thread and the writer thread). Receiving
//    endpoints cycle over 10 names, sending endpoints over 5 and types over 30, so a filter
//    on one endpoint and one type matches 1 message in 30.
// 2. --big N messages with --kb KB JSON bodies, batches of 20, 8 clients (J2's shape).
// 3. search latencies (median of 15) over everything, all in one 1 h partition.
// CPU time, not wall time, is the figure to compare: others use the same cores.
// The requests are sent by bench_http_post (bench/journal/http_post.c) when it is built next
// to opsd (BUILD/bench/bench_http_post, -DOPSD_BENCH=ON) or named by BENCH_POST_TOOL: node's
// fetch spent more CPU per 66 KB message than opsd. Else by fetch, as before.
// PERF_OUT=FILE: `perf record -g` of opsd during the loads (perf report --comms jnl-writer).
import { readFileSync, readdirSync } from 'node:fs';
import { resolve } from 'node:path';
import { spawn } from 'node:child_process';
import { postTool, writeBodies, postFile } from './post_tool.mjs';
import { workDir, startOpsd, http, freePort } from '../../tests/integration/lib/opsd.mjs';
import { nsbHeaders } from '../../tests/integration/lib/journal_rabbit.mjs';
import { finish } from '../../tests/integration/lib/harness.mjs';

const args = process.argv.slice(2);
const opt = (name, dflt) => { const i = args.indexOf(name); return i >= 0 ? Number(args[i + 1]) : dflt; };
process.env.OPSD = resolve(args[0] || 'build-rel', 'opsd');
const SMALL = opt('--small', 300000);
const BIG = opt('--big', 3000);
const KB = opt('--kb', 66);
const SEARCH = !args.includes('--no-search');

const work = workDir('bench_journal_cpu');
const config = (port, dataDir) => `
server: {listen: 127.0.0.1:${port}, data_dir: ${dataDir}}
journal:
  retention: 7d
  partition: 1h
  inline_max: 85000
  body_max: 102400
  disk_floor: 0
  queue_max: 2000000
  breaker: {failures: 1000000}
`;
void freePort;
function threadCpu(pid) {
  const o = { all: 0, loop: 0, writer: 0, fltLoop: 0, fltWriter: 0 };
  for (const t of readdirSync(`/proc/${pid}/task`)) {
    try {
      const raw = readFileSync(`/proc/${pid}/task/${t}/stat`, 'utf8');
      const name = raw.slice(raw.indexOf('(') + 1, raw.lastIndexOf(')'));
      const f = raw.slice(raw.lastIndexOf(')') + 2).split(' ');
      const v = (Number(f[11]) + Number(f[12])) / 100;
      o.all += v;
      if (String(pid) === t) { o.loop += v; o.fltLoop += Number(f[7]); }
      else if (name === 'jnl-writer') { o.writer += v; o.fltWriter += Number(f[7]); }
    } catch { /* the thread ended */ }
  }
  return o;
}
const uptime = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
const d = await startOpsd(work, { config });
const BASE = Date.now() - 1800000;
const EPS = ['Sales', 'Billing', 'Shipping', 'Warehouse', 'Crm', 'Audit', 'Pricing', 'Invoices', 'Returns', 'Support'];
const SENDERS = ['ClientUI', 'Web', 'Api', 'Batch', 'Scheduler'];
const TYPES = Array.from({ length: 30 }, (_, k) => `Shop.Messages.Type${k}`);
function small(i) {
  const h = nsbHeaders(i, { base: BASE + Math.floor(i / 100), endpoint: EPS[i % 10] });
  h['NServiceBus.OriginatingEndpoint'] = SENDERS[i % 5];
  h['NServiceBus.EnclosedMessageTypes'] = `${TYPES[i % 30]}, Shop.Messages`;
  const sent = BASE + Math.floor(i / 100);
  const w = (ms) => new Date(ms).toISOString();
  h['NServiceBus.ProcessingStarted'] = w(sent + (i * 7919) % 500);
  h['NServiceBus.ProcessingEnded'] = w(sent + 500 + (i * 104729) % 5000);
  return { headers: h, body: `{"orderId":${i},"item":"widget"}` };
}
const tool = postTool(process.env.OPSD);
console.log(`requests sent by ${tool || "node's fetch"}`);
async function load(n, batch, conc, mk) {
  const pre = [];
  for (let first = 0; first < n; first += batch) {
    const msgs = [];
    for (let i = first; i < Math.min(first + batch, n); i++) msgs.push(mk(i));
    pre.push(JSON.stringify({ messages: msgs }));
  }
  let next = 0;
  const file = tool ? writeBodies(pre, work.dir) : null;
  const c0 = threadCpu(d.pid);
  const self0 = process.cpuUsage();
  const t0 = Date.now();
  let toolCpu = 0;
  if (tool) {
    toolCpu = await postFile(tool, d.url, '/api/v1/messages', file, conc);
    next = pre.length;
  }
  const worker = async () => {
    for (;;) {
      const k = next++;
      if (k >= pre.length) return;
      for (let attempt = 0; ; attempt++) {
        try { // a kept-alive connection the server closed meanwhile: send again (copies are recognised)
          const r = await fetch(`${d.url}/api/v1/messages`, { method: 'POST', body: pre[k] });
          if (r.status !== 200) throw new Error(`POST ${r.status}: ${(await r.text()).slice(0, 200)}`);
          await r.arrayBuffer();
          break;
        } catch (e) {
          if (attempt >= 3 || !/fetch failed/.test(e.message)) throw e;
        }
      }
    }
  };
  await Promise.all(Array.from({ length: conc }, worker));
  const c1 = threadCpu(d.pid);
  const self = process.cpuUsage(self0);
  self.user += toolCpu * 1e6;
  const s = (Date.now() - t0) / 1000;
  const us = (x) => (x * 1e6 / n).toFixed(1);
  return `${n} msgs, ${(n / s).toFixed(0)} msg/s, opsd CPU µs/msg ${us(c1.all - c0.all)} (loop ${us(c1.loop - c0.loop)}, writer ${us(c1.writer - c0.writer)}, others ${us(c1.all - c1.loop - c1.writer - c0.all + c0.loop + c0.writer)}); client CPU µs/msg ${us((self.user + self.system) / 1e6)}; page faults/msg loop ${((c1.fltLoop - c0.fltLoop) / n).toFixed(2)}, writer ${((c1.fltWriter - c0.fltWriter) / n).toFixed(2)}; load ${uptime()}`;
}
function body(kb, seed) {
  const words = ['order', 'customer', 'widget', 'quantity', 'price', 'shipping', 'address', 'street', 'city', 'total'];
  let s = '{"items":[';
  let x = seed * 2654435761 >>> 0;
  while (s.length < kb * 1000 - 40) {
    x = (x * 1103515245 + 12345) >>> 0;
    s += `{"${words[x % 10]}":"${words[(x >> 8) % 10]}-${x % 100000}","n":${x % 997}},`;
  }
  return s.slice(0, kb * 1000 - 2) + ']}';
}
let perf = null;
if (process.env.PERF_OUT) {
  perf = spawn('perf', ['record', '-g', '-F', '1999', '-p', String(d.pid), '-o', process.env.PERF_OUT], { stdio: 'ignore' });
  await new Promise((r) => setTimeout(r, 500));
}
if (SMALL) console.log(`small: ${await load(SMALL, 1000, 8, small)}`);
if (BIG) {
  const bodies = Array.from({ length: 16 }, (_, k) => body(KB, k));
  console.log(`${KB} KB: ${await load(BIG, 20, 8, (i) => ({ headers: nsbHeaders(5000000 + i, { base: BASE }), body: bodies[i % 16] }))}`);
}
if (perf) {
  perf.kill('SIGINT');
  await new Promise((r) => perf.on('exit', r));
}
async function lat(what, path) {
  const t = [];
  let total;
  for (let k = 0; k < 15; k++) {
    const t0 = performance.now();
    const r = await http(d, 'GET', path);
    if (r.status !== 200) throw new Error(`${what}: ${r.status}`);
    t.push(performance.now() - t0);
    total = r.json.total;
  }
  t.sort((a, b) => a - b);
  console.log(`search: ${what}: ${t[7].toFixed(1)} ms (total ${total})`);
}
if (SEARCH) {
  await lat('newest 50, with total', '/api/v1/messages?limit=50');
  await lat('endpoint filter (1/10)', '/api/v1/messages?endpoint=Billing&limit=50');
  await lat('endpoint + type filter (1/30)', '/api/v1/messages?endpoint=Billing&type=Shop.Messages.Type1&limit=50');
  await lat('type filter, rare (1/30 of 1/10... none here: Type7 at Billing)', '/api/v1/messages?endpoint=Billing&type=Shop.Messages.Type7&limit=50');
  await lat('sort by critical time', '/api/v1/messages?sort=critical_time&limit=50');
  await lat('sort by processing time', '/api/v1/messages?sort=processing_time&limit=50');
  await lat('sort by time sent, ascending', '/api/v1/messages?sort=time_sent&direction=asc&limit=50');
  await lat('endpoint filter, sort by critical time', '/api/v1/messages?endpoint=Sales&sort=critical_time&limit=50');
  await lat('endpoint + type, sort by processing time', '/api/v1/messages?endpoint=Billing&type=Shop.Messages.Type1&sort=processing_time&limit=50');
}
console.log(`load ${uptime()}`);
await finish();

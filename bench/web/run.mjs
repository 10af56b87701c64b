// Web UI benchmark (issue: 25 trend clients and 5 alarm summaries during an alarm storm):
// headless chromium (playwright-core from web/node_modules) opens 25 Trend pages (10 live
// pens each, 1 h window) and 5 Alarms pages (each filtered in the server to one group,
// priority 1, active) against a real opsd; then a storm moves 3,000 alarms (4 thresholds,
// 10 groups) high and, 2.5 s later, low: 18,000 events in about 3 s. Measured: the time
// from an alarm's event ("since", the server's clock) to its row on screen (a
// MutationObserver in each Alarms page; same machine, same clock), p50/p99/max; the trend
// pages' live values folded in; browser CPU (every process under this node process) and
// opsd CPU over the storm, and opsd's peak RSS.
//
//   node bench/web/run.mjs OPSD_BINARY            (scripts/web.sh first; /usr/bin/chromium)
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const { chromium } = await import(join(ROOT, 'web/node_modules/playwright-core/index.mjs'));
const opsdBin = process.argv[2];
if (!opsdBin) {
  console.error('usage: node bench/web/run.mjs OPSD_BINARY');
  process.exit(2);
}
const TICK = 100; /* clock ticks per second in /proc */
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const freePort = () => new Promise((res) => {
  const s = createServer();
  s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => res(port)); });
});

function cpuOf(pid) {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return (Number(f[11]) + Number(f[12])) / TICK; /* utime + stime, seconds */
  } catch {
    return 0;
  }
}
function descendants(root) {
  const kids = new Map();
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const ppid = Number(readFileSync(`/proc/${d}/stat`, 'utf8').split(') ')[1].split(' ')[1]);
      if (!kids.has(ppid)) kids.set(ppid, []);
      kids.get(ppid).push(Number(d));
    } catch { /* gone */ }
  }
  const out = [];
  const walk = (p) => { for (const k of kids.get(p) ?? []) { out.push(k); walk(k); } };
  walk(root);
  return out;
}
const browserCpu = (exclude) => descendants(process.pid).filter((p) => p !== exclude).reduce((s, p) => s + cpuOf(p), 0);
const pct = (a, q) => (a.length ? a[Math.min(a.length - 1, Math.floor(q * a.length))] : NaN);

const dir = mkdtempSync(join(tmpdir(), 'opsd-bench-web.'));
const port = await freePort();
const cfg = `server:
  listen: 127.0.0.1:${port}
  data_dir: ${dir}/data
  log_level: warn
drivers:
  - type: simulator
    name: plant
    points:
      - {name: "tank1-{0000..0249}", type: double, pattern: sine, period: 1s, min: 0, max: 100}
points:
  - {name: "t{1..4}-{00..09}-{000..299}", type: double, writable: true}
history:
  retention: 1d
  record:
    - {match: "tank1-*", mode: on_change}
deployment:
  state: Normal
  states:
    Normal: {hhMax: 380, hMax: 350, lMin: 280, llMin: 250}
alarms:
  - area: Intake
    each: {g: "00..09", i: "000..299"}
    group: "group-$g"
    name: "load-$g-$i"
    expression: "{t1-$g-$i} + {t2-$g-$i} + {t3-$g-$i} + {t4-$g-$i}"
    thresholds:
      - {name: HH, op: ">=", limit: hhMax, deadband: 5, priority: 1, message: "load too high: {value:0.00}"}
      - {name: H, op: ">=", limit: hMax, deadband: 5, priority: 2, message: "load high: {value:0.00}"}
      - {name: L, op: "<=", limit: lMin, deadband: 5, priority: 2, message: "load low: {value:0.00}"}
      - {name: LL, op: "<=", limit: llMin, deadband: 5, priority: 1, message: "load too low: {value:0.00}"}
`;
writeFileSync(join(dir, 'opsd.yaml'), cfg);
const opsd = spawn(opsdBin, ['--config', join(dir, 'opsd.yaml')], { stdio: ['ignore', 'ignore', 'pipe'] });
let log = '';
opsd.stderr.on('data', (b) => { log += b; });
const url = `http://127.0.0.1:${port}`;
const cleanup = async (browser) => {
  if (browser) await browser.close().catch(() => {});
  opsd.kill('SIGTERM');
  await new Promise((r) => opsd.on('exit', r));
  rmSync(dir, { recursive: true, force: true });
};
for (let i = 0; ; i++) {
  try { if ((await fetch(`${url}/healthz`)).ok) break; } catch { /* not yet */ }
  if (i > 300) { console.error(`opsd did not start: ${log.slice(-500)}`); await cleanup(); process.exit(1); }
  await sleep(100);
}
// A normal starting point: every load 300 (no alarm).
const names = [];
for (const t of [1, 2, 3, 4]) for (let g = 0; g < 10; g++) for (let i = 0; i < 300; i++) names.push(`t${t}-${String(g).padStart(2, '0')}-${String(i).padStart(3, '0')}`);
const setAll = async (v) => {
  const chunks = [];
  for (let k = 0; k < names.length; k += 3000) chunks.push(names.slice(k, k + 3000));
  await Promise.all(chunks.map((c) => fetch(`${url}/api/v1/samples`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ samples: c.map((p) => ({ point: p, value: v })) }),
  })));
};
await setAll(75);
await sleep(3000); /* some history for the trends */

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
const trends = [];
for (let c = 0; c < 25; c++) {
  const pens = Array.from({ length: 10 }, (_, k) => `tank1-${String((c * 10 + k) % 250).padStart(4, '0')}`);
  const p = await ctx.newPage();
  await p.goto(`${url}/#/trend?points=${pens.join(',')}&span=3600000`);
  trends.push(p);
}
const alarmsPages = [];
for (let c = 0; c < 5; c++) {
  const p = await ctx.newPage();
  await p.goto(`${url}/#/alarms?state=active&group=group-0${c}&priority=1`);
  await p.locator('#al-summary').waitFor();
  await p.evaluate(() => {
    window.__lat = [];
    new MutationObserver((ms) => {
      const now = Date.now();
      for (const m of ms) for (const n of m.addedNodes) {
        const s = n.dataset && Number(n.dataset.since);
        if (s && !n.__seen) { n.__seen = true; window.__lat.push(now - s); }
      }
    }).observe(document.getElementById('al-rows'), { childList: true });
  });
  alarmsPages.push(p);
}
for (const p of trends) await p.locator('#tr-chart[data-history-rows]').waitFor({ timeout: 30000 });
await sleep(2000);
const appends0 = await Promise.all(trends.map((p) => p.locator('#tr-chart').getAttribute('data-live-appends')));

const opsdCpu0 = cpuOf(opsd.pid);
const brCpu0 = browserCpu(opsd.pid);
const t0 = Date.now();
await setAll(100);   /* 400: H and HH raise (6,000 events) */
await sleep(2500);
await setAll(50);    /* 200: HH and H clear, L and LL raise (12,000 events) */
await sleep(6000);   /* let every summary settle */
const secs = (Date.now() - t0) / 1000;
const opsdCpu = cpuOf(opsd.pid) - opsdCpu0;
const brCpu = browserCpu(opsd.pid) - brCpu0;
const lat = (await Promise.all(alarmsPages.map((p) => p.evaluate(() => window.__lat)))).flat().sort((a, b) => a - b);
const appends1 = await Promise.all(trends.map((p) => p.locator('#tr-chart').getAttribute('data-live-appends')));
const folded = appends1.reduce((s, v, i) => s + (Number(v) - Number(appends0[i])), 0);
const m = await (await fetch(`${url}/metrics`)).text();
const events = Number((m.match(/^opsd_alarm_events_total (\S+)/m) || [])[1]);
const rss = (readFileSync(`/proc/${opsd.pid}/status`, 'utf8').match(/VmHWM:\s+(\d+)/) || [])[1];
console.log(`web bench: 25 trend pages x 10 pens (1 h, live) + 5 alarm summaries (group, priority 1, active)`);
console.log(`  alarm events in opsd: ${events} over the storm`);
console.log(`  event -> row on screen: ${lat.length} rows, p50 ${pct(lat, 0.5)} ms, p99 ${pct(lat, 0.99)} ms, max ${lat[lat.length - 1]} ms`);
console.log(`  trend pages: ${folded} live values folded in over ${secs.toFixed(1)} s`);
console.log(`  CPU over ${secs.toFixed(1)} s: browser ${brCpu.toFixed(1)} s (${(100 * brCpu / secs).toFixed(0)} % of one core), opsd ${opsdCpu.toFixed(1)} s (${(100 * opsdCpu / secs).toFixed(0)} %); opsd peak RSS ${(rss / 1024).toFixed(0)} MiB`);
await cleanup(browser);

// Shared pieces of the fault harness: a daemon that keeps its port and data dir across
// kill -9 and restarts, plain HTTP with a bound on every wait, percentiles, and the
// "ok - " / "not ok - " lines that tests/integration/run.sh and scripts/test.sh count.
//
// Environment: OPSD (the binary), FAULT_PORT (first port to use; default: free ports),
// FAULT_KEEP=1 keeps the work dirs, IT_PIDS (set by tests/integration/run.sh: where each
// started opsd leaves its pid so a file killed by its timeout is cleaned up).

import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync, openSync, closeSync, readFileSync, unlinkSync } from 'node:fs';
import { createServer } from 'node:net';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let passed = 0;
let failed = 0;
export const counts = () => ({ passed, failed });

export function diag(...lines) {
  for (const l of lines.join(' ').split('\n')) console.log(`# ${l}`);
}

export function check(name, ok, reason = '') {
  if (ok) {
    passed++;
    console.log(`ok - ${name}`);
  } else {
    failed++;
    console.log(`not ok - ${name}: ${String(reason).replace(/\s+/g, ' ').slice(0, 700)}`);
  }
  return ok;
}

const cleanups = [];
export function onCleanup(fn) {
  cleanups.push(fn);
}
export async function finish() {
  while (cleanups.length) {
    try {
      await cleanups.pop()();
    } catch (e) {
      diag(`cleanup: ${e && e.message}`);
    }
  }
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}
for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, async () => {
    failed++;
    console.log('not ok - interrupted');
    await finish();
  });
}

// args(['--kills', '5']) -> {kills: '5'}; flags without a value are true.
export function parseArgs(argv = process.argv.slice(2)) {
  const o = { _: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (!a.startsWith('--')) {
      o._.push(a);
      continue;
    }
    const k = a.slice(2);
    if (i + 1 < argv.length && !argv[i + 1].startsWith('--')) o[k] = argv[++i];
    else o[k] = true;
  }
  return o;
}

let nextPort = process.env.FAULT_PORT ? Number(process.env.FAULT_PORT) : 0;
export function port() {
  if (nextPort) return Promise.resolve(nextPort++);
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const p = s.address().port;
      s.close(() => resolve(p));
    });
  });
}

export function workDir(name) {
  const dir = mkdtempSync(join(process.env.FAULT_TMP || tmpdir(), `opsd-fault-${name}.`));
  onCleanup(() => {
    if (process.env.FAULT_KEEP || failed) diag(`work dir kept: ${dir}`);
    else rmSync(dir, { recursive: true, force: true });
  });
  return dir;
}

// A daemon with a fixed port, config and data dir: start() again after a kill -9 reuses them.
// nofile: the soft RLIMIT_NOFILE opsd starts with (the hard limit stays as inherited).
export class Daemon {
  constructor({ dir, port: p, config, nofile = 0, tag = 'opsd' }) {
    this.dir = dir;
    this.port = p;
    this.url = `http://127.0.0.1:${p}`;
    this.wsUrl = `ws://127.0.0.1:${p}/api/v1/stream`;
    this.configPath = join(dir, `${tag}.yaml`);
    this.logPath = join(dir, `${tag}.log`);
    this.nofile = nofile;
    this.proc = null;
    this.starts = 0;
    writeFileSync(this.configPath, config);
    onCleanup(() => this.stop('SIGTERM', 10000));
  }

  // start() -> ms until /healthz answered 200 (bounded: throws after `ms`).
  async start(ms = 60000) {
    const t0 = Date.now();
    const fd = openSync(this.logPath, 'a');
    const cmd = this.nofile
      ? ['sh', ['-c', `ulimit -Sn ${this.nofile} && exec "$0" "$@"`, process.env.OPSD, '--config', this.configPath]]
      : [process.env.OPSD, ['--config', this.configPath]];
    const proc = spawn(cmd[0], cmd[1], { stdio: ['ignore', 'ignore', fd] });
    closeSync(fd);
    this.proc = proc;
    this.starts++;
    this.exitInfo = null;
    this.exited = new Promise((resolve) => proc.on('exit', (code, signal) => {
      this.exitInfo = { code, signal };
      resolve(this.exitInfo);
    }));
    if (process.env.IT_PIDS) {
      try { writeFileSync(join(process.env.IT_PIDS, String(proc.pid)), String(proc.pid)); } catch { /* best effort */ }
    }
    for (;;) {
      if (this.exitInfo) throw new Error(`opsd exited (${JSON.stringify(this.exitInfo)}) before it was healthy: ${this.logTail()}`);
      const r = await request(this, 'GET', '/healthz', undefined, {}, 1000).catch(() => null);
      if (r && r.status === 200) return Date.now() - t0;
      if (Date.now() - t0 > ms) throw new Error(`opsd not healthy within ${ms} ms: ${this.logTail()}`);
      await sleep(20);
    }
  }

  kill9() {
    try { this.proc.kill('SIGKILL'); } catch { /* gone */ }
    return this.exited.then((e) => {
      this.forget();
      return e;
    });
  }

  async stop(signal = 'SIGTERM', ms = 10000) {
    if (!this.proc || this.exitInfo) return this.exitInfo;
    try { this.proc.kill(signal); } catch { /* gone */ }
    let t;
    const e = await Promise.race([this.exited, new Promise((r) => { t = setTimeout(() => r(null), ms); })]);
    clearTimeout(t);
    if (!e) {
      try { this.proc.kill('SIGKILL'); } catch { /* gone */ }
      await this.exited;
    }
    this.forget();
    return { ...this.exitInfo, killed: !e };
  }

  forget() {
    if (process.env.IT_PIDS && this.proc) {
      try { unlinkSync(join(process.env.IT_PIDS, String(this.proc.pid))); } catch { /* not there */ }
    }
  }

  logTail(n = 600) {
    try {
      return readFileSync(this.logPath, 'utf8').slice(-n);
    } catch {
      return '';
    }
  }

  sanitizerReport() {
    let t = '';
    try { t = readFileSync(this.logPath, 'utf8'); } catch { return null; }
    const m = t.split('\n').find((l) => /ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:/.test(l));
    return m || null;
  }
}

// One HTTP request on its own connection (agent: false): {status, text, json, ms}.
// Rejects on a connection error or when no full answer came within `ms`.
export function request(d, method, path, body, headers = {}, ms = 15000) {
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    const h = { ...headers };
    let data;
    if (body !== undefined) {
      data = Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
      h['Content-Type'] = h['Content-Type'] || 'application/json';
      h['Content-Length'] = data.length;
    }
    const req = http.request({ host: '127.0.0.1', port: d.port, method, path, headers: h, agent: false });
    const timer = setTimeout(() => {
      req.destroy(new Error(`no answer within ${ms} ms`));
    }, ms);
    req.on('response', (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        clearTimeout(timer);
        const text = Buffer.concat(chunks).toString();
        let json = null;
        try { json = JSON.parse(text); } catch { /* not JSON */ }
        resolve({ status: res.statusCode, text, json, headers: res.headers, ms: Number(process.hrtime.bigint() - t0) / 1e6 });
      });
      res.on('error', (e) => { clearTimeout(timer); reject(e); });
    });
    req.on('error', (e) => { clearTimeout(timer); reject(e); });
    if (data) req.write(data);
    req.end();
  });
}

// GET /api/v1/status every `interval` ms, each on a new connection, for ms: the latencies of
// the answers (ms) and the reasons of the failures.
export async function pollStatus(d, headers, ms, interval = 50) {
  const lat = [];
  const fails = [];
  const end = Date.now() + ms;
  while (Date.now() < end) {
    const t = Date.now();
    try {
      const r = await request(d, 'GET', '/api/v1/status', undefined, headers, 5000);
      if (r.status === 200) lat.push(r.ms);
      else fails.push(`HTTP ${r.status}`);
    } catch (e) {
      fails.push(e.message);
    }
    const left = interval - (Date.now() - t);
    if (left > 0) await sleep(left);
  }
  return { lat, fails };
}

export function percentile(sorted, p) {
  if (!sorted.length) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

export function summary(values) {
  const s = [...values].sort((a, b) => a - b);
  return { n: s.length, p50: percentile(s, 50), p99: percentile(s, 99), max: s.length ? s[s.length - 1] : NaN };
}

export const fmt = (x, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : '-');

// opsd's {"error":{"code"}}, or on the NCMP paths NCMP's {"status":"500 INTERNAL_SERVER_ERROR"}.
export function errCode(r) {
  if (!r || !r.json) return '';
  if (r.json.error) return r.json.error.code;
  return typeof r.json.status === 'string' ? r.json.status.replace(/^\d+ /, '') : '';
}

// Reads the history of each point over the range of the wanted times: Map point -> Map ts -> value.
export async function readHistory(d, points, want) {
  const got = new Map();
  for (const p of points) {
    const tss = [...want.get(p).keys()];
    let from = Infinity;
    let to = -Infinity;
    for (const t of tss) { if (t < from) from = t; if (t > to) to = t; }
    const m = new Map();
    got.set(p, m);
    if (!tss.length) continue;
    let cursor = '';
    for (let page = 0; page < 1000; page++) {
      const q = `/api/v1/history?points=${encodeURIComponent(p)}&from=${from}&to=${to}&limit=1000000${cursor ? `&cursor=${cursor}` : ''}`;
      const r = await request(d, 'GET', q, undefined, {}, 60000);
      if (r.status !== 200) throw new Error(`GET ${q}: ${r.status} ${r.text.slice(0, 200)}`);
      for (const s of r.json.series[0].samples) m.set(s[0], s[1]);
      if (!r.json.next) break;
      cursor = r.json.next;
    }
  }
  return got;
}

export async function checkHistory(d, want) {
  const got = await readHistory(d, [...want.keys()], want);
  let n = 0;
  const missing = [];
  const wrong = [];
  for (const [p, tv] of want) {
    for (const [t, v] of tv) {
      n++;
      if (!got.get(p).has(t)) missing.push(`${p}@${t}`);
      else if (got.get(p).get(t) !== v) wrong.push(`${p}@${t}: ${JSON.stringify(got.get(p).get(t))} != ${JSON.stringify(v)}`);
    }
  }
  if (missing.length) return [false, `${missing.length} of ${n} acknowledged samples missing (first: ${missing.slice(0, 3).join(', ')})`];
  if (wrong.length) return [false, `${wrong.length} of ${n} samples with another value (first: ${wrong.slice(0, 2).join('; ')})`];
  return [true, '', `${n} samples`];
}

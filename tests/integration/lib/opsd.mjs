// Node helpers for the opsd integration tests: start a real opsd on a free loopback port
// with its own config and data dir in a temp dir, HTTP helpers, and a WebSocket client
// (the npm package `ws`) that queues every message so tests can wait for one with a bound.
//
// Environment (set by run.sh): OPSD (the binary), IT_OUT (where logs of failed files go),
// IT_PIDS (a folder where each started opsd leaves its pid).

import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, readFileSync, rmSync, mkdirSync, cpSync, unlinkSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, basename } from 'node:path';
import WebSocket from 'ws';
import { onCleanup, sleep, diag, failures } from './harness.mjs';

export { WebSocket };

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

// The standard test configuration (see lib.sh write_config), with optional additions.
export function standardConfig({ port, dataDir, limits = '{slow_client_timeout: 2s, max_subscriptions: 64}',
  serverExtra = '', simExtra = '', pointsExtra = '', auth = '' }) {
  return `server:
  listen: 127.0.0.1:${port}
  data_dir: ${dataDir}
  limits: ${limits}
${auth}
${serverExtra}
drivers:
  - type: simulator
    name: plant
    points:
      - {name: "tank1-{0000..0099}", type: double, pattern: sine, period: 200ms, min: 0, max: 100, resolution: 0.01}
${simExtra}
points:
  - {name: "ext-{000..009}", type: double, unit: bar, writable: true}
  - {name: "flag", type: bool, writable: true}
  - {name: "count", type: int, writable: true}
  - {name: "label", type: string, writable: true}
${pointsExtra}
`;
}

const SANITIZER_RE = /ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|WARNING: ThreadSanitizer/;

// A work dir shared by every opsd a test file starts; kept under IT_OUT when asked.
export function workDir(name) {
  const dir = mkdtempSync(join(tmpdir(), `opsd-it-${name}.`));
  // Tell run.sh where it is, so it can keep the logs and remove it if this file gets killed.
  if (process.env.IT_PIDS) writeFileSync(join(process.env.IT_PIDS, `work.${name}`), dir);
  const w = {
    dir,
    name,
    keep: false,
    daemons: [],
    sanitizerReport() {
      for (const d of w.daemons) {
        const m = d.log().split('\n').find((l) => SANITIZER_RE.test(l));
        if (m) return m;
      }
      return null;
    },
  };
  onCleanup(async () => {
    for (const d of w.daemons) await d.stop('SIGTERM', 5000);
    if (w.keep || failures() > 0 || process.env.IT_KEEP) {
      const out = join(process.env.IT_OUT || 'out', name);
      mkdirSync(out, { recursive: true });
      cpSync(dir, out, { recursive: true, filter: (src) => !/^data\d*$/.test(basename(src)) });
    }
    rmSync(dir, { recursive: true, force: true });
    if (process.env.IT_PIDS) rmSync(join(process.env.IT_PIDS, `work.${name}`), { force: true });
  });
  return w;
}

// startOpsd(work, {config(port, dataDir) -> yaml, args, ready}) -> daemon handle.
// Waits for GET /healthz (30 s bound); throws with the log tail when opsd does not get there.
export async function startOpsd(work, { config, args = [], env = {}, tag = '' } = {}) {
  const port = await freePort();
  const n = work.daemons.length;
  const dataDir = join(work.dir, `data${n}`);
  const configPath = join(work.dir, `opsd${n}${tag}.yaml`);
  writeFileSync(configPath, config(port, dataDir));
  const logPath = join(work.dir, `opsd.${n}.log`);
  let logBuf = '';
  let outBuf = '';
  const proc = spawn(process.env.OPSD, ['--config', configPath, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...env },
  });
  proc.stdout.on('data', (b) => { outBuf += b; });
  proc.stderr.on('data', (b) => { logBuf += b; });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  let exitInfo = null;
  exited.then((e) => { exitInfo = e; });
  if (process.env.IT_PIDS) {
    try { writeFileSync(join(process.env.IT_PIDS, String(proc.pid)), String(proc.pid)); } catch { /* best effort */ }
  }
  const d = {
    port,
    pid: proc.pid,
    proc,
    configPath,
    dataDir,
    url: `http://127.0.0.1:${port}`,
    wsUrl: `ws://127.0.0.1:${port}/api/v1/stream`,
    log: () => logBuf,
    stdout: () => outBuf,
    exited,
    get exitInfo() { return exitInfo; },
    // stop(signal, ms) -> {code, signal, killed}: sends the signal, waits at most ms, then KILL.
    async stop(signal = 'SIGTERM', ms = 10000) {
      if (!exitInfo) {
        try { proc.kill(signal); } catch { /* gone */ }
        let timer;
        const res = await Promise.race([exited, new Promise((r) => { timer = setTimeout(() => r(null), ms); })]);
        clearTimeout(timer);
        if (!res) {
          try { proc.kill('SIGKILL'); } catch { /* gone */ }
          const e = await exited;
          writeFileSync(logPath, logBuf);
          return { ...e, killed: true };
        }
      }
      writeFileSync(logPath, logBuf);
      if (process.env.IT_PIDS) {
        try { unlinkSync(join(process.env.IT_PIDS, String(proc.pid))); } catch { /* not there */ }
      }
      return { ...exitInfo, killed: false };
    },
    rssKiB() {
      try {
        const m = readFileSync(`/proc/${proc.pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/);
        return m ? +m[1] : null;
      } catch {
        return null;
      }
    },
  };
  work.daemons.push(d);
  const deadline = Date.now() + 30000;
  for (;;) {
    if (exitInfo) throw new Error(`opsd exited (${JSON.stringify(exitInfo)}) before it was healthy: ${logBuf.slice(-600)}`);
    try {
      const r = await fetch(`${d.url}/healthz`, { signal: AbortSignal.timeout(1000) });
      if (r.status === 200) break;
    } catch { /* not yet */ }
    if (Date.now() > deadline) throw new Error(`opsd not healthy within 30 s: ${logBuf.slice(-600)}`);
    await sleep(100);
  }
  return d;
}

// http(d, method, path, body?, headers?) -> {status, json, text}
export async function http(d, method, path, body, headers = {}) {
  const opts = { method, headers: { ...headers }, signal: AbortSignal.timeout(15000) };
  if (body !== undefined) {
    opts.body = typeof body === 'string' ? body : JSON.stringify(body);
    opts.headers['Content-Type'] = 'application/json';
  }
  const r = await fetch(`${d.url}${path}`, opts);
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, json, text, headers: r.headers };
}

export async function metrics(d, headers = {}) {
  const r = await http(d, 'GET', '/metrics', undefined, headers);
  const m = new Map();
  for (const line of r.text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    m.set(line.slice(0, i), Number(line.slice(i + 1)));
  }
  return m;
}

// A WebSocket client that queues every message (parsed JSON, or {raw} when not JSON).
export class Client {
  constructor(ws) {
    this.ws = ws;
    this.msgs = [];
    this.waiters = [];
    this.closeInfo = null;
    this.closed = new Promise((resolve) => {
      ws.on('close', (code, reason) => {
        this.closeInfo = { code, reason: reason.toString() };
        resolve(this.closeInfo);
        this._wake();
      });
    });
    ws.on('error', (e) => { this.lastError = e; });
    ws.on('message', (data, isBinary) => {
      let m;
      try { m = JSON.parse(data.toString()); } catch { m = { raw: data.toString(), binary: isBinary }; }
      m._t = Date.now();
      this.msgs.push(m);
      this._wake();
    });
  }

  // connect(url, opts) -> Client; rejects with the HTTP status when the upgrade is refused.
  static connect(url, opts = {}) {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url, { handshakeTimeout: 10000, ...opts });
      const c = new Client(ws);
      ws.once('open', () => resolve(c));
      ws.once('unexpected-response', (req, res) => {
        const e = new Error(`upgrade refused: HTTP ${res.statusCode}`);
        e.status = res.statusCode;
        res.resume();
        req.destroy();
        reject(e);
      });
      ws.once('error', (e) => reject(e));
      ws.once('close', () => reject(new Error('closed before open')));
    });
  }

  _wake() {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  send(obj) {
    this.ws.send(typeof obj === 'string' ? obj : JSON.stringify(obj));
  }

  // next(pred, ms, what): the first queued message matching pred (removed from the queue).
  async next(pred, ms = 5000, what = 'a message') {
    const deadline = Date.now() + ms;
    for (;;) {
      const i = this.msgs.findIndex(pred);
      if (i >= 0) return this.msgs.splice(i, 1)[0];
      if (this.closeInfo) throw new Error(`connection closed (${this.closeInfo.code} ${this.closeInfo.reason}) while waiting for ${what}`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no ${what} within ${ms} ms; queued: ${JSON.stringify(this.msgs.slice(-3)).slice(0, 300)}`);
      await new Promise((r) => {
        const t = setTimeout(r, left);
        this.waiters.push(() => { clearTimeout(t); r(); });
      });
    }
  }

  // take(pred): removes and returns every queued message matching pred.
  take(pred = () => true) {
    const got = [];
    this.msgs = this.msgs.filter((m) => (pred(m) ? (got.push(m), false) : true));
    return got;
  }

  // during(ms, pred): waits ms, then take(pred).
  async during(ms, pred) {
    await sleep(ms);
    return this.take(pred);
  }

  update(id, ms = 5000) {
    return this.next((m) => m.op === 'update' && m.id === id, ms, `an update for '${id}'`);
  }

  error(id, ms = 5000) {
    return this.next((m) => m.op === 'error' && m.id === id, ms, `an error for '${id}'`);
  }

  close() {
    try { this.ws.close(); } catch { /* already */ }
  }

  terminate() {
    try { this.ws.terminate(); } catch { /* already */ }
  }
}

export function withTimeout(p, ms, what) {
  let t;
  return Promise.race([p, new Promise((_, rej) => { t = setTimeout(() => rej(new Error(`${what}: no result within ${ms} ms`)), ms); })])
    .finally(() => clearTimeout(t));
}

export { diag };

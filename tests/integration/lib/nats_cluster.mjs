// NATS servers for the cluster tests: Debian's nats-server, N of them with JetStream, clustered
// on loopback ports, each with its own config and store in the test's work dir. Every server
// started is killed by the harness's cleanup (also when the file is stopped by its timeout).
// Also a minimal NATS publisher over a raw socket (CONNECT, PUB, PING/PONG), to put bytes
// nobody else would send on a subject.
import { spawn, spawnSync } from 'node:child_process';
import { writeFileSync, mkdirSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { onCleanup, sleep } from './harness.mjs';
import { freePort } from './opsd.mjs';

// The nats-server binary, or null when it is not installed.
export function natsServerPath() {
  for (const p of ['/usr/sbin/nats-server', '/usr/bin/nats-server']) {
    const r = spawnSync(p, ['--version'], { encoding: 'utf8' });
    if (r.status === 0) return p;
  }
  const r = spawnSync('nats-server', ['--version'], { encoding: 'utf8' });
  return r.status === 0 ? 'nats-server' : null;
}

// startNatsCluster(work, n) -> {servers: [{url, port, monitor, proc, stop(), start()}], urls}
// Waits (bounded) until every server answers /healthz with JetStream ready.
export async function startNatsCluster(work, n = 3, { timeoutMs = 30000 } = {}) {
  const bin = natsServerPath();
  if (!bin) throw new Error('nats-server is not installed (scripts/deps.sh test)');
  const ports = [];
  for (let i = 0; i < n; i++) ports.push({ client: await freePort(), route: await freePort(), monitor: await freePort() });
  const routes = ports.map((p) => `nats://127.0.0.1:${p.route}`).join(', ');
  const servers = [];
  for (let i = 0; i < n; i++) {
    const dir = join(work.dir, `nats${i}`);
    mkdirSync(dir, { recursive: true });
    const conf = join(dir, 'nats.conf');
    writeFileSync(conf, `server_name: n${i}
listen: 127.0.0.1:${ports[i].client}
http: 127.0.0.1:${ports[i].monitor}
jetstream { store_dir: "${join(dir, 'js')}" }
${n > 1 ? `cluster { name: opsdtest, listen: 127.0.0.1:${ports[i].route}, routes: [${routes}] }` : ''}
`);
    const s = {
      url: `nats://127.0.0.1:${ports[i].client}`,
      monitor: ports[i].monitor,
      proc: null,
      log: '',
      start() {
        s.proc = spawn(bin, ['-c', conf], { stdio: ['ignore', 'pipe', 'pipe'] });
        s.proc.stdout.on('data', (b) => { s.log += b; });
        s.proc.stderr.on('data', (b) => { s.log += b; });
        s.exited = new Promise((resolve) => s.proc.on('exit', resolve));
      },
      async stop(signal = 'SIGKILL') {
        if (!s.proc || s.proc.exitCode !== null || s.proc.signalCode) return;
        s.proc.kill(signal);
        await Promise.race([s.exited, sleep(5000)]);
        writeFileSync(join(dir, 'nats.log'), s.log);
      },
    };
    s.start();
    servers.push(s);
  }
  onCleanup(async () => { for (const s of servers) await s.stop(); });
  await waitHealthy(servers, timeoutMs);
  return { servers, urls: servers.map((s) => s.url) };
}

export async function waitHealthy(servers, timeoutMs = 30000) {
  const deadline = Date.now() + timeoutMs;
  for (const s of servers) {
    for (;;) {
      try {
        const r = await fetch(`http://127.0.0.1:${s.monitor}/healthz?js-enabled-only=true`, { signal: AbortSignal.timeout(1000) });
        if (r.status === 200) break;
      } catch { /* not yet */ }
      if (Date.now() > deadline) throw new Error(`nats-server ${s.url} not healthy within ${timeoutMs} ms: ${s.log.slice(-500)}`);
      await sleep(200);
    }
  }
}

// publishRaw(url, subject, Buffer[]) -> resolves once the server answered PONG after the PUBs.
export function publishRaw(url, subject, payloads, timeoutMs = 5000) {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const sock = connect(+port, hostname);
    let got = '';
    const timer = setTimeout(() => { sock.destroy(); reject(new Error(`no PONG from ${url}`)); }, timeoutMs);
    sock.on('error', (e) => { clearTimeout(timer); reject(e); });
    sock.on('data', (b) => {
      got += b.toString('latin1');
      if (got.startsWith('INFO') && !sock.sent) {
        sock.sent = true;
        const parts = [Buffer.from('CONNECT {"verbose":false,"pedantic":false}\r\n')];
        for (const p of payloads) parts.push(Buffer.from(`PUB ${subject} ${p.length}\r\n`), p, Buffer.from('\r\n'));
        parts.push(Buffer.from('PING\r\n'));
        sock.write(Buffer.concat(parts));
      }
      if (got.includes('PONG')) {
        clearTimeout(timer);
        sock.end();
        resolve();
      }
      if (got.includes('-ERR')) {
        clearTimeout(timer);
        sock.destroy();
        reject(new Error(`NATS said ${got.slice(got.indexOf('-ERR'), got.indexOf('-ERR') + 120)}`));
      }
    });
  });
}

// A mosquitto broker (Debian's) for the MQTT driver tests: its own config, port and
// directory, started and stopped by the test (stop and start again on the same port inject a
// broker outage). Only the process this helper started is ever signalled.
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { join } from 'node:path';
import { onCleanup, sleep } from './harness.mjs';

function portOpen(port) {
  return new Promise((resolve) => {
    const s = createConnection({ host: '127.0.0.1', port });
    s.on('connect', () => { s.destroy(); resolve(true); });
    s.on('error', () => resolve(false));
  });
}

export class MosquittoBroker {
  // extra: more configuration lines (another listener with TLS, log types); port stays the
  // plain listener the helper waits for.
  constructor({ port, dir, extra = '' }) {
    this.port = port;
    this.dir = dir;
    this.proc = null;
    this.log = '';
    this.conf = join(dir, 'mosquitto.conf');
    writeFileSync(this.conf, `per_listener_settings false\nallow_anonymous true\npersistence false\n` +
      `listener ${port} 127.0.0.1\n${extra}`);
    onCleanup(() => this.stop());
  }

  async start() {
    const bin = process.env.MOSQUITTO || '/usr/sbin/mosquitto';
    this.proc = spawn(bin, ['-c', this.conf], { stdio: ['ignore', 'pipe', 'pipe'] });
    this.proc.stdout.on('data', (b) => { this.log += b; });
    this.proc.stderr.on('data', (b) => { this.log += b; });
    const exited = new Promise((resolve) => this.proc.on('exit', resolve));
    this.exited = exited;
    const end = Date.now() + 10000;
    while (!(await portOpen(this.port))) {
      if (this.proc.exitCode !== null) throw new Error(`mosquitto exited: ${this.log.slice(-400)}`);
      if (Date.now() > end) throw new Error(`mosquitto not listening within 10 s: ${this.log.slice(-400)}`);
      await sleep(50);
    }
  }

  async stop() {
    if (!this.proc || this.proc.exitCode !== null) return;
    const p = this.proc;
    p.kill('SIGTERM');
    const t = setTimeout(() => p.kill('SIGKILL'), 5000);
    await this.exited;
    clearTimeout(t);
    this.proc = null;
  }
}

// A private RabbitMQ broker for the journal's tests: Debian's rabbitmq-server started with its
// own node name, ports (AMQP, distribution, epmd), data and log dirs and HOME (Erlang cookie)
// under the test's work dir, and stopped at the end (the broker's process group, then its
// own epmd). Publishing goes through the npm package amqplib: a client no one here wrote.
import { spawn, execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync, readFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import amqp from 'amqplib';
import { onCleanup, sleep } from './harness.mjs';
import { freePort } from './opsd.mjs';

export { amqp };

const SERVER = '/usr/lib/rabbitmq/bin/rabbitmq-server'; // the Debian wrapper would switch user

export async function startRabbit(work, { timeoutMs = 75000 } = {}) {
  if (!existsSync(SERVER)) throw new Error(`${SERVER} is missing: scripts/deps.sh installs rabbitmq-server`);
  const base = join(work.dir, 'rabbit');
  for (const d of ['mnesia', 'log', 'home']) mkdirSync(join(base, d), { recursive: true });
  writeFileSync(join(base, 'enabled_plugins'), '[].\n');
  writeFileSync(join(base, 'inetrc'), '{lookup, [file, native]}.\n{hosts_file, "/etc/hosts"}.\n');
  const port = await freePort();
  const epmd = await freePort();
  const dist = await freePort();
  const node = `opsdit${process.pid}@localhost`;
  const env = {
    ...process.env,
    HOME: join(base, 'home'),
    ERL_INETRC: join(base, 'inetrc'),
    ERL_EPMD_PORT: String(epmd),
    RABBITMQ_NODE_PORT: String(port),
    RABBITMQ_NODE_IP_ADDRESS: '127.0.0.1',
    RABBITMQ_DIST_PORT: String(dist),
    RABBITMQ_NODENAME: node,
    RABBITMQ_MNESIA_BASE: join(base, 'mnesia'),
    RABBITMQ_LOG_BASE: join(base, 'log'),
    RABBITMQ_ENABLED_PLUGINS_FILE: join(base, 'enabled_plugins'),
    RABBITMQ_PID_FILE: join(base, 'pid'),
    RABBITMQ_CONFIG_FILE: join(base, 'rabbitmq'),
    RABBITMQ_ADVANCED_CONFIG_FILE: join(base, 'advanced.config'),
    RABBITMQ_CONF_ENV_FILE: join(base, 'rabbitmq-env.conf'),
  };
  let out = '';
  const proc = spawn(SERVER, [], { env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  proc.stdout.on('data', (b) => { out += b; });
  proc.stderr.on('data', (b) => { out += b; });
  let exited = false;
  proc.on('exit', () => { exited = true; });
  if (process.env.IT_PIDS) writeFileSync(join(process.env.IT_PIDS, String(proc.pid)), String(proc.pid));
  const r = {
    port,
    url: `amqp://guest:guest@127.0.0.1:${port}/`,
    log: () => out,
    async stop() {
      if (!exited) {
        try { process.kill(-proc.pid, 'SIGTERM'); } catch { /* gone */ }
        for (let i = 0; i < 100 && !exited; i++) await sleep(100);
        if (!exited) try { process.kill(-proc.pid, 'SIGKILL'); } catch { /* gone */ }
      }
      try { execFileSync('epmd', ['-kill'], { env, stdio: 'ignore', timeout: 5000 }); } catch { /* none */ }
    },
  };
  onCleanup(() => r.stop());
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (exited) throw new Error(`rabbitmq-server exited: ${out.slice(-800)}`);
    try {
      const c = await amqp.connect(r.url);
      await c.close();
      break;
    } catch { /* not yet */ }
    if (Date.now() > deadline) throw new Error(`rabbitmq-server not up within ${timeoutMs} ms: ${out.slice(-800)}`);
    await sleep(250);
  }
  return r;
}

// NServiceBus-style audit headers for message i.
export function nsbHeaders(i, { endpoint = 'Sales', conv = `conv-${i % 10}`, base = Date.now() - 60000 } = {}) {
  const wire = (ms) => {
    const d = new Date(ms);
    const p = (n, w = 2) => String(n).padStart(w, '0');
    return `${d.getUTCFullYear()}-${p(d.getUTCMonth() + 1)}-${p(d.getUTCDate())} ${p(d.getUTCHours())}:` +
      `${p(d.getUTCMinutes())}:${p(d.getUTCSeconds())}:${p(d.getUTCMilliseconds(), 3)}000 Z`;
  };
  const sent = base + i;
  return {
    'NServiceBus.MessageId': `msg-${String(i).padStart(6, '0')}`,
    'NServiceBus.MessageIntent': 'Send',
    'NServiceBus.ConversationId': conv,
    'NServiceBus.CorrelationId': `msg-${String(i).padStart(6, '0')}`,
    'NServiceBus.EnclosedMessageTypes': 'Shop.Messages.PlaceOrder, Shop.Messages, Version=1.0.0.0, Culture=neutral, PublicKeyToken=null',
    'NServiceBus.OriginatingEndpoint': 'ClientUI',
    'NServiceBus.OriginatingMachine': 'WEB01',
    'NServiceBus.ProcessingEndpoint': endpoint,
    'NServiceBus.ProcessingMachine': 'APP01',
    'NServiceBus.ContentType': 'application/json',
    'NServiceBus.TimeSent': wire(sent),
    'NServiceBus.ProcessingStarted': wire(sent + 5),
    'NServiceBus.ProcessingEnded': wire(sent + 25),
    'NServiceBus.Version': '8.1.6',
  };
}

export function readLog(path) {
  try { return readFileSync(path, 'utf8'); } catch { return ''; }
}

// The demo's outside world, started by scripts/demo.sh once opsd listens: it feeds the
// modules that wait for other systems, so every page of the web UI has something to show.
//   - ext-000..099 (pressures "fed by an external system"): a slow wave per point, written
//     every second through POST /api/v1/samples; ext-000..009 cross the demo's alarm limits
//     (8 and 9 bar) now and then, so alarms come and go. alarm.horn follows the unacknowledged
//     priority 1 alarms; setpoint.temperature gets a value.
//   - a DMI plugin simulator (the registry's test peer, tests/integration/lib/registry_dmi.mjs)
//     and 24 devices registered against it at POST /ncmpInventory/v1/ch; every 30 s one
//     device leaves and comes back (lifecycle events on the Devices page).
//   - NServiceBus-shaped audit messages posted to POST /api/v1/messages: every 2 s an order's
//     conversation (PlaceOrder -> OrderPlaced -> OrderBilled -> ShipOrder), headers as
//     NServiceBus writes them, JSON bodies.
// Usage: node scripts/demo-feed.mjs http://127.0.0.1:8080/ [TOKEN]   (node's standard
// library only; exits when opsd has been unreachable for 5 s).
import { randomUUID } from 'node:crypto';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const { startDmi } = await import(join(ROOT, 'tests/integration/lib/registry_dmi.mjs'));

const base = (process.argv[2] || 'http://127.0.0.1:8080/').replace(/\/$/, '');
const token = process.argv[3] || process.env.OPSD_TOKEN || '';
const say = (m) => process.stderr.write(`demo-feed: ${m}\n`);

let failures = 0;
async function call(method, path, body) {
  const headers = { 'Content-Type': 'application/json' };
  if (token) headers.Authorization = `Bearer ${token}`;
  try {
    const r = await fetch(base + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    failures = 0;
    const text = await r.text();
    if (!r.ok) say(`${method} ${path}: HTTP ${r.status} ${text.slice(0, 200)}`);
    return { status: r.status, json: text.startsWith('{') ? JSON.parse(text) : null };
  } catch (e) {
    if (++failures >= 5) {
      say(`opsd at ${base} is gone (${e.cause?.code || e.message}): stopping`);
      process.exit(0);
    }
    return { status: 0, json: null };
  }
}

// ---- points ----
const t0 = Date.now();
function pressure(i, t) {
  const s = (t - t0) / 1000;
  const period = 70 + (i % 7) * 13;            /* seconds */
  const amp = i < 10 ? 3.4 + (i % 4) * 0.25 : 2.5;
  const v = 5.5 + amp * Math.sin((2 * Math.PI * s) / period + i * 0.9) + 0.15 * Math.sin(s * 1.7 + i);
  return Math.round(v * 100) / 100;
}
async function feedPoints() {
  const now = Date.now();
  const samples = [];
  for (let i = 0; i < 100; i++) samples.push({ point: `ext-${String(i).padStart(3, '0')}`, value: pressure(i, now), ts: now });
  await call('POST', '/api/v1/samples', { samples });
}
async function horn() {
  const r = await call('GET', '/api/v1/alarms?state=active_unack&priority=1&limit=1');
  if (r.json && typeof r.json.total === 'number') await call('POST', '/api/v1/samples', { samples: [{ point: 'alarm.horn', value: r.json.total > 0 }] });
}

// ---- devices ----
const SITES = ['north', 'south', 'east'];
const KINDS = [['plc', 'plcV2'], ['rtu', 'rtuV1'], ['meter', 'meterV3'], ['drive', '']];
function devices(plugin) {
  const out = [];
  for (let n = 0; n < 24; n++) {
    const site = SITES[n % 3];
    const [kind, tag] = KINDS[n % 4];
    const id = `${kind}-${site}-${String(n + 1).padStart(2, '0')}`;
    const d = { cmHandle: id, alternateId: `plant/${site}/${kind}/${n + 1}`, publicCmHandleProperties: { site, kind } };
    if (tag) d.moduleSetTag = tag;
    out.push(d);
  }
  return { dmiPlugin: plugin, createdCmHandles: out };
}

// ---- messages ----
const wire = (ms) => new Date(ms).toISOString().replace('T', ' ').replace(/\.(\d+)Z$/, ':$1000 Z');
const STEPS = [
  ['Shop.Messages.Commands.PlaceOrder', 'Send', 'ClientUI', 'Sales'],
  ['Shop.Messages.Events.OrderPlaced', 'Publish', 'Sales', 'Billing'],
  ['Shop.Messages.Events.OrderBilled', 'Publish', 'Billing', 'Shipping'],
  ['Shop.Messages.Commands.ShipOrder', 'Send', 'Shipping', 'Shipping'],
];
let orderNo = 1000;
async function conversation() {
  const conv = randomUUID();
  const order = ++orderNo;
  let t = Date.now() - 400;
  let prev = null;
  const messages = [];
  for (const [type, intent, from, to] of STEPS) {
    const id = randomUUID();
    const took = 3 + Math.round(Math.random() * 40);
    const headers = {
      'NServiceBus.MessageId': id,
      'NServiceBus.MessageIntent': intent,
      'NServiceBus.ConversationId': conv,
      'NServiceBus.CorrelationId': prev ?? id,
      'NServiceBus.EnclosedMessageTypes': `${type}, Shop.Messages, Version=1.0.0.0, Culture=neutral, PublicKeyToken=null`,
      'NServiceBus.OriginatingEndpoint': from,
      'NServiceBus.OriginatingMachine': `${from.toLowerCase()}-01`,
      'NServiceBus.ProcessingEndpoint': to,
      'NServiceBus.ProcessingMachine': `${to.toLowerCase()}-01`,
      'NServiceBus.TimeSent': wire(t),
      'NServiceBus.ProcessingStarted': wire(t + 5),
      'NServiceBus.ProcessingEnded': wire(t + 5 + took),
      'NServiceBus.ContentType': 'application/json',
      'NServiceBus.Version': '9.2.3',
    };
    if (prev) headers['NServiceBus.RelatedTo'] = prev;
    const body = { orderId: `order-${order}`, customer: `customer-${order % 37}`, lines: 1 + (order % 5), total: Math.round((order % 97) * 13.7 * 100) / 100 };
    messages.push({ headers, body: JSON.stringify(body) });
    prev = id;
    t += 20 + took;
  }
  await call('POST', '/api/v1/messages', { messages });
}

// ---- start ----
const dmi = await startDmi({ delayMs: 20 });
say(`DMI plugin simulator at ${dmi.url}`);
const reg = await call('POST', '/ncmpInventory/v1/ch', devices(dmi.url));
if (reg.status >= 200 && reg.status < 300) say('24 devices registered');
await call('PUT', '/api/v1/points/setpoint.temperature', { value: 21.5 });

let tick = 0;
let away = null;
setInterval(async () => {
  tick++;
  await feedPoints();
  if (tick % 2 === 0) await horn();
  if (tick % 2 === 1) await conversation();
  if (tick % 30 === 0) {
    /* one device leaves, and comes back on the next round */
    if (away) {
      await call('POST', '/ncmpInventory/v1/ch', { dmiPlugin: dmi.url, createdCmHandles: [away] });
      away = null;
    } else {
      const all = devices(dmi.url).createdCmHandles;
      away = all[(tick / 30) % all.length];
      await call('POST', '/ncmpInventory/v1/ch', { dmiPlugin: dmi.url, removedCmHandles: [away.cmHandle] });
    }
  }
}, 1000);
const stop = () => {
  void dmi.close();
  process.exit(0);
};
process.on('SIGINT', stop);
process.on('SIGTERM', stop);

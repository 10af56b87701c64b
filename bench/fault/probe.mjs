// The legitimate client of the flood, in a process of its own (the attacker's event loop is
// busy with thousands of sockets, which would delay a client measured inside it):
// GET /api/v1/status every INTERVAL ms on a new connection, for MS milliseconds; prints one
// JSON line {lat: [ms...], fails: [reason...]} at the end.
//
//   node bench/fault/probe.mjs PORT TOKEN MS [INTERVAL]
import { request, sleep } from './lib.mjs';

const [port, token, ms, interval = '50'] = process.argv.slice(2);
const d = { port: Number(port) };
const lat = [];
const fails = [];
const end = Date.now() + Number(ms);
while (Date.now() < end) {
  const t = Date.now();
  try {
    const r = await request(d, 'GET', '/api/v1/status', undefined, { Authorization: `Bearer ${token}` }, 5000);
    if (r.status === 200) lat.push(r.ms);
    else fails.push(`HTTP ${r.status}`);
  } catch (e) {
    fails.push(e.message);
  }
  const left = Number(interval) - (Date.now() - t);
  if (left > 0) await sleep(left);
}
process.stdout.write(`${JSON.stringify({ lat, fails })}\n`);

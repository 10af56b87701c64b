// The legitimate client of the flood, in a process of its own (the attacker's event loop is
// busy with thousands of sockets, which would delay a client measured inside it):
// GET /api/v1/status every INTERVAL ms on a new connection, for MS milliseconds; prints one
// JSON line {lat: [ms...], fails: [reason...]} at the end.
//
//   node bench/fault/probe.mjs PORT TOKEN MS [INTERVAL]
import { pollStatus } from './lib.mjs';

const [port, token, ms, interval = '50'] = process.argv.slice(2);
const r = await pollStatus({ port: Number(port) }, { Authorization: `Bearer ${token}` }, Number(ms), Number(interval));
process.stdout.write(`${JSON.stringify(r)}\n`);

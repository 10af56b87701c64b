// wsprobe URL [HEADER_TOKEN]: connects to the stream, subscribes to ext-000 and prints
// "update" when the first update arrives, "refused N" when the upgrade is answered with HTTP
// status N, "closed CODE REASON" when the server closes the connection after the upgrade, or
// "error MESSAGE". Bounded: 8 s. Used by the shell tests (t_auth.sh).
import { Client } from './opsd.mjs';

const [url, token] = process.argv.slice(2);
const timer = setTimeout(() => { console.log('error timeout'); process.exit(0); }, 8000);
try {
  const opts = token ? { headers: { Authorization: `Bearer ${token}` } } : {};
  const c = await Client.connect(url, opts);
  c.send({ op: 'subscribe', id: 'p', points: ['ext-000'], interval: '100ms' });
  const m = await c.next((x) => x.id === 'p', 5000, 'an answer').catch((e) => {
    if (c.closeInfo) return { closed: c.closeInfo };
    throw e;
  });
  if (m.closed) console.log(`closed ${m.closed.code} ${m.closed.reason}`);
  else console.log(m.op === 'update' ? 'update' : `got ${JSON.stringify(m)}`);
  c.close();
} catch (e) {
  console.log(e.status ? `refused ${e.status}` : `error ${e.message}`);
}
clearTimeout(timer);
process.exit(0);

// The network edge against hostile clients (docs/API.md "Limits", docs/security.md): request
// heads held open (slowloris), stream upgrades without a token, bodies a role may not send,
// bodies framed in ways opsd does not take, oversized paths. Each case was once a defect
// reproduced from outside; every answer here must come at once, not after a timeout.
import net from 'node:net';
import { readFileSync } from 'node:fs';
import { test, finish, assert, assertEq, sleep, failTest, diag } from './lib/harness.mjs';
import { workDir, startOpsd, standardConfig, http, metrics, Client } from './lib/opsd.mjs';

const auth = `  auth:
    tokens:
      - {name: viewer1, token: "viewtok", role: viewer}
      - {name: op1, token: "optok", role: operator}`;
const work = workDir('t_edge');
let d;
try {
  d = await startOpsd(work, {
    config: (port, dataDir) => standardConfig({
      port, dataDir, auth, limits: '{max_clients: 100, max_connections: 4096, max_per_address: 1024, head_timeout: 3s}',
    }),
  });
} catch (e) {
  failTest('edge: opsd starts', e.message);
  await finish();
}
const OP = { Authorization: 'Bearer optok' };
const VIEW = { Authorization: 'Bearer viewtok' };

// Sends raw bytes on a new connection; resolves with what came back within ms (and whether
// the server closed the connection).
function raw(data, ms = 3000, port = d.port) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    let got = Buffer.alloc(0);
    const done = (closed) => { clearTimeout(t); s.destroy(); resolve({ text: got.toString('latin1'), closed }); };
    const t = setTimeout(() => done(false), ms);
    s.on('connect', () => s.write(data));
    s.on('data', (b) => { got = Buffer.concat([got, b]); if (/\r\n\r\n/.test(got.toString('latin1'))) done(false); });
    s.on('error', () => done(true));
    s.on('end', () => done(true));
  });
}
const statusOf = (text) => Number((/^HTTP\/1\.[01] (\d{3})/.exec(text) || [])[1] || 0);

// Opens n connections that each send an incomplete request head, and keeps them.
async function holdHeads(n, port = d.port, head = 'GET /healthz HTTP/1.1\r\nHost: x\r\n') {
  const socks = [];
  for (let i = 0; i < n; i++) {
    const s = net.connect(port, '127.0.0.1');
    s.on('error', () => {});
    s.closedByPeer = false;
    s.on('close', () => { s.closedByPeer = true; });
    await new Promise((resolve) => { s.once('connect', resolve); s.once('error', resolve); });
    s.write(head);
    socks.push(s);
  }
  return socks;
}
const release = (socks) => { for (const s of socks) s.destroy(); };

function rssKiB(pid) {
  const m = /VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) : 0;
}

await test('chunked request body: 411 at once, nothing applied', async () => {
  const body = '{"samples":[{"point":"ext-007","value":42}]}';
  const r = await raw('POST /api/v1/samples HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer optok\r\n' +
    `Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`);
  assertEq(statusOf(r.text), 411, `answer (${r.text.slice(0, 60)})`);
  const p = await http(d, 'GET', '/api/v1/points/ext-007', undefined, OP);
  assert(p.json && p.json.value !== 42, `ext-007 must not be written: ${p.text}`);
}, { timeout: 8000 });

await test('Content-Length that is not a size (-1, 2^66, 1e3): 400 at once; none on HTTP/1.1: an empty body', async () => {
  for (const cl of ['-1', '73786976294838206464', '1e3', ' 12x']) {
    const r = await raw(`POST /api/v1/samples HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer optok\r\nContent-Length: ${cl}\r\n\r\n`);
    assertEq(statusOf(r.text), 400, `Content-Length: ${cl}`);
  }
  const r = await raw('POST /api/v1/samples HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer optok\r\n\r\n');
  assertEq(statusOf(r.text), 400, 'no Content-Length (an empty body is not a samples document)');
}, { timeout: 15000 });

await test('a path longer than 1023 bytes: 414', async () => {
  const r = await raw(`GET /api/v1/points/${'a'.repeat(3000)} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer optok\r\n\r\n`);
  assertEq(statusOf(r.text), 414, 'status');
});

await test('a viewer cannot make opsd buffer a body: 403 from the headers, memory flat', async () => {
  const before = rssKiB(d.pid);
  const socks = [];
  let answered = 0;
  for (let i = 0; i < 30; i++) {
    const s = net.connect(d.port, '127.0.0.1');
    s.on('error', () => {});
    let got = '';
    let counted = false;
    s.on('data', (b) => {
      got += b.toString('latin1');
      if (!counted && statusOf(got) === 403) { counted = true; answered++; }
    });
    await new Promise((resolve) => s.once('connect', resolve));
    s.write('POST /api/v1/samples HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer viewtok\r\n' +
      'Content-Type: application/json\r\nContent-Length: 16000000\r\n\r\n');
    // The answer comes from the headers alone; whatever of the body follows is not read.
    for (let w = 0; w < 100 && statusOf(got) !== 403; w++) await sleep(20);
    s.write(Buffer.alloc(4 << 20, 0x20));
    socks.push(s);
  }
  await sleep(1000);
  const grown = (rssKiB(d.pid) - before) >> 10;
  release(socks);
  assertEq(answered, 30, '403 answers before the body was sent');
  assert(grown < 64, `RSS grew by ${grown} MiB`);
  // An operator may still send a body (and a large one).
  const ok = await http(d, 'POST', '/api/v1/samples', { samples: [{ point: 'ext-001', value: 1.5 }] }, OP);
  assertEq(ok.status, 200, 'operator POST');
}, { timeout: 20000 });

// Bytes pipelined behind a refused upgrade (another request, WebSocket frames) are never read:
// the refusal closes the connection (the kept-alive path after a refused upgrade is where
// libwebsockets 4.1 has CVE-2025-11677).
await test('a refused upgrade closes its connection: pipelined requests and frames behind it are not read', async () => {
  const up = 'GET /api/v1/stream HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n' +
    'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n';
  const behind = ['GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n', up, '\x81\x85abcdhello'.repeat(20)];
  for (const tail of behind) {
    const r = await new Promise((resolve) => {
      const s = net.connect(d.port, '127.0.0.1');
      let got = '';
      const t = setTimeout(() => { s.destroy(); resolve({ got, closed: false }); }, 3000);
      s.on('connect', () => s.write(up + tail));
      s.on('data', (b) => { got += b.toString('latin1'); });
      s.on('error', () => {});
      s.on('close', () => { clearTimeout(t); resolve({ got, closed: true }); });
    });
    assertEq(statusOf(r.got), 401, 'refused upgrade');
    assert(r.closed, 'connection closed after the refusal');
    assertEq((r.got.match(/HTTP\/1\.[01] /g) || []).length, 1, `one answer only, got: ${r.got.slice(0, 300)}`);
  }
  assertEq((await http(d, 'GET', '/healthz')).status, 200, 'opsd still serving');
}, { timeout: 20000 });

await test('stream upgrades without a token: 401 before the upgrade, no client slot taken', async () => {
  const r = await raw('GET /api/v1/stream HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n' +
    'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n');
  assertEq(statusOf(r.text), 401, 'token-less upgrade');
  // Three times max_clients of them, held open, then a viewer connects and is served.
  const socks = await holdHeads(300, d.port, 'GET /api/v1/stream?token=nope HTTP/1.1\r\nHost: x\r\n' +
    'Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n' +
    'Sec-WebSocket-Version: 13\r\n\r\n');
  try {
    const c = await Client.connect(`${d.wsUrl}?token=viewtok`);
    c.send({ op: 'ping', id: 'p' });
    const m = await c.next((x) => x.op === 'pong', 3000, 'pong');
    assertEq(m.op, 'pong', 'viewer served');
    c.close();
  } finally {
    release(socks);
  }
  const st = (await http(d, 'GET', '/api/v1/status', undefined, VIEW)).json;
  assert(st.clients <= 1, `clients ${st.clients}`);
}, { timeout: 30000 });

await test('slowloris: 1,500 held request heads without a token; a client with a token is still served', async () => {
  const socks = await holdHeads(1500);
  try {
    const t0 = Date.now();
    const h = await http(d, 'GET', '/healthz');
    const s = await http(d, 'GET', '/api/v1/status', undefined, VIEW);
    assertEq([h.status, s.status], [200, 200], '/healthz and /api/v1/status');
    diag(`with 1,500 held heads: /healthz + /api/v1/status in ${Date.now() - t0} ms; connections ${JSON.stringify(s.json.connections)}`);
  } finally {
    release(socks);
  }
}, { timeout: 60000 });

await test('head_timeout: a connection without a complete head is closed; the counter says so', async () => {
  const socks = await holdHeads(5);
  await sleep(4500);
  const closed = socks.filter((s) => s.closedByPeer).length;
  release(socks);
  assertEq(closed, 5, 'connections closed by opsd after head_timeout (3 s)');
  const m = await metrics(d, VIEW);
  assert(m.get('opsd_http_head_timeouts_total') >= 5, `opsd_http_head_timeouts_total ${m.get('opsd_http_head_timeouts_total')}`);
}, { timeout: 15000 });

let e;
try {
  e = await startOpsd(work, {
    tag: '-peer',
    config: (port, dataDir) => standardConfig({
      port, dataDir, auth, limits: '{max_connections: 200, max_per_address: 50, head_timeout: 30s}',
    }),
  });
} catch (err) {
  failTest('edge: second opsd starts', err.message);
  await finish();
}

await test('max_per_address and max_connections: the oldest idle connections give way to a new client', async () => {
  const socks = await holdHeads(400, e.port);
  try {
    const s = await http(e, 'GET', '/api/v1/status', undefined, VIEW);
    assertEq(s.status, 200, '/api/v1/status with 400 held heads, 50 allowed per address');
    assert(s.json.connections.open <= 50, `open ${s.json.connections.open}`);
    const m = await metrics(e, VIEW);
    assert(m.get('opsd_http_connections_evicted_total') >= 350, `evicted ${m.get('opsd_http_connections_evicted_total')}`);
    let closed = 0;
    for (let w = 0; w < 50 && closed < 350; w++) {
      await sleep(100);
      closed = socks.filter((x) => x.closedByPeer).length;
    }
    assert(closed >= 350, `held connections closed by opsd: ${closed}`);
  } finally {
    release(socks);
  }
}, { timeout: 40000 });

await test('a kept-alive client outlasts held heads: fresh idle connections give way first', async () => {
  // One connection that has made a request and stays open between requests.
  const k = net.connect(e.port, '127.0.0.1');
  let got = '';
  k.on('data', (b) => { got += b.toString('latin1'); });
  k.on('error', () => {});
  await new Promise((resolve) => k.once('connect', resolve));
  const ask = async () => {
    got = '';
    k.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
    for (let w = 0; w < 100 && !/\r\n\r\n[\s\S]*\}/.test(got); w++) await sleep(20);
    return statusOf(got);
  };
  assertEq(await ask(), 200, 'first request');
  const socks = await holdHeads(120, e.port);
  try {
    assertEq(await ask(), 200, 'second request on the kept-alive connection after 120 held heads (50 per address)');
  } finally {
    release(socks);
    k.destroy();
  }
}, { timeout: 20000 });

await test('no sanitizer report', async () => {
  const rep = work.sanitizerReport();
  assert(!rep, rep);
});

await finish();

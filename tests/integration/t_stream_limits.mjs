// Stream limits and hostile clients: oversized messages, a subscription flood, many
// connections, max_clients, abrupt disconnects, and a slow client that never reads.
// opsd must stay up, answer /healthz, and keep its memory bounded. docs/API.md "WebSocket stream".
import { test, finish, assert, assertEq, sleep, failTest, diag } from './lib/harness.mjs';
import { workDir, startOpsd, standardConfig, http, metrics, Client, withTimeout } from './lib/opsd.mjs';

const work = workDir('t_stream_limits');
let d;
try {
  d = await startOpsd(work, {
    config: (port, dataDir) => standardConfig({
      port, dataDir, limits: '{slow_client_timeout: 2s, max_subscriptions: 64, max_clients: 100}',
    }),
  });
} catch (e) {
  failTest('stream limits: opsd starts', e.message);
  await finish();
}
await sleep(400);

async function healthy(dd = d) {
  const r = await http(dd, 'GET', '/healthz');
  assertEq(r.status, 200, 'GET /healthz');
}

async function waitClients(n, ms = 5000, dd = d) {
  const deadline = Date.now() + ms;
  let st;
  for (;;) {
    st = (await http(dd, 'GET', '/api/v1/status')).json;
    if (st && st.clients === n) return st;
    if (Date.now() > deadline) throw new Error(`status.clients: expected ${n}, got ${st && st.clients} after ${ms} ms`);
    await sleep(100);
  }
}

await test('a message over 1 MiB closes the connection; opsd stays up', async () => {
  const other = await Client.connect(d.wsUrl);
  const c = await Client.connect(d.wsUrl);
  c.send({ op: 'ping', pad: 'x'.repeat(1536 * 1024) });
  const ci = await withTimeout(c.closed, 5000, 'close after a 1.5 MiB message');
  diag(`close after a 1.5 MiB message: ${ci.code} ${ci.reason}`);
  await healthy();
  other.send({ op: 'ping' });
  await other.next((m) => m.op === 'pong', 3000, 'a pong on another connection');
  other.close();
});

await test('a message over 1 MiB in several fragments closes the connection too', async () => {
  const c = await Client.connect(d.wsUrl);
  const part = 'y'.repeat(640 * 1024);
  c.ws.send(`{"op":"ping","pad":"${part}`, { fin: false });
  c.ws.send(`${part}"}`, { fin: true });
  await withTimeout(c.closed, 5000, 'close after a fragmented 1.25 MiB message');
  await healthy();
});

await test('a message just under 1 MiB is taken (answered, connection open)', async () => {
  const c = await Client.connect(d.wsUrl);
  c.send({ op: 'ping', pad: 'z'.repeat(1000 * 1024) });
  const m = await c.next((x) => x.op === 'pong' || x.op === 'error', 5000, 'a pong or an error op');
  diag(`answer to a 1000 KiB ping: ${JSON.stringify(m).slice(0, 200)}`);
  c.send({ op: 'ping' });
  await c.next((x) => x.op === 'pong', 3000, 'a pong');
  assert(!c.closeInfo, 'connection closed');
  c.close();
});

await test('subscription flood: 1000 subscribes on one connection, too_many_subscriptions after 64', async () => {
  const c = await Client.connect(d.wsUrl);
  try {
    for (let i = 0; i < 1000; i++) c.send({ op: 'subscribe', id: `f${i}`, points: ['ext-000', 'tank1-0001'], interval: '1s' });
    const deadline = Date.now() + 20000;
    let errs = [];
    let ups = [];
    while (Date.now() < deadline) {
      errs = errs.concat(c.take((m) => m.op === 'error'));
      ups = ups.concat(c.take((m) => m.op === 'update'));
      if (errs.length >= 936 && new Set(ups.map((u) => u.id)).size >= 64) break;
      if (c.closeInfo) {
        throw new Error(`connection closed ${JSON.stringify(c.closeInfo)} after ${errs.length} error ops ` +
          `(${[...new Set(errs.map((e) => e.error && e.error.code))].join(',')}) and updates for ${new Set(ups.map((u) => u.id)).size} ids`);
      }
      await sleep(100);
    }
    const codes = [...new Set(errs.map((e) => e.error && e.error.code))];
    assertEq(codes, ['too_many_subscriptions'], 'error codes');
    assertEq(errs.length, 936, 'errors for subscriptions beyond 64');
    const okIds = new Set(ups.map((u) => u.id));
    assertEq(okIds.size, 64, 'subscriptions that got updates');
    for (const e of errs) assert(!okIds.has(e.id), `${e.id} got both an error and updates`);
    const st = (await http(d, 'GET', '/api/v1/status')).json;
    assertEq(st.subscriptions, 64, 'status.subscriptions');
    // At the limit, subscribing again with a used id replaces it.
    const used = [...okIds][0];
    c.send({ op: 'subscribe', id: used, points: ['ext-001'], interval: '1s' });
    const u = await c.next((m) => m.id === used && (m.op === 'error' || (m.op === 'update' && m.values.some((v) => v[0] === 'ext-001'))), 5000, `the replacement of ${used}`);
    assertEq(u.op, 'update', `replacing ${used} at the limit`);
    await healthy();
    c.close();
    await withTimeout(c.closed, 5000, 'close');
    await waitClients(0);
    const st2 = (await http(d, 'GET', '/api/v1/status')).json;
    assertEq(st2.subscriptions, 0, 'status.subscriptions after the flooding client left');
  } finally {
    c.close();
  }
}, { timeout: 40000 });

await test('after the flood: opsd answers /healthz and takes new connections', async () => {
  await healthy();
  const c = await Client.connect(d.wsUrl);
  c.send({ op: 'ping' });
  await c.next((m) => m.op === 'pong', 3000, 'a pong');
  c.close();
  await withTimeout(c.closed, 5000, 'close');
  await waitClients(0);
});

await test('paced subscribes (one at a time): 64 accepted, then too_many_subscriptions; unsubscribe frees a slot', async () => {
  const c = await Client.connect(d.wsUrl);
  try {
    let ok = 0;
    let refused = 0;
    for (let i = 0; i < 100; i++) {
      c.send({ op: 'subscribe', id: `q${i}`, points: ['ext-000'], interval: '1s' });
      const m = await c.next((x) => x.id === `q${i}` && (x.op === 'update' || x.op === 'error'), 5000, `the answer to q${i}`);
      if (m.op === 'update') ok++;
      else {
        assertEq(m.error && m.error.code, 'too_many_subscriptions', `error for q${i}`);
        refused++;
      }
    }
    assertEq([ok, refused], [64, 36], 'accepted and refused subscriptions');
    c.send({ op: 'unsubscribe', id: 'q3' });
    await c.next((x) => x.op === 'unsubscribed' && x.id === 'q3', 3000, 'unsubscribed q3');
    c.send({ op: 'subscribe', id: 'q-new', points: ['ext-000'], interval: '1s' });
    const m = await c.next((x) => x.id === 'q-new' && (x.op === 'update' || x.op === 'error'), 5000, 'the answer to q-new');
    assertEq(m.op, 'update', 'a subscription after an unsubscribe at the limit');
  } finally {
    c.close();
  }
  await waitClients(0);
}, { timeout: 40000 });

// A refused client on a raw socket: the frames opsd sends until it closes the TCP connection.
// RFC 6455 5.5.1: an endpoint sends one close frame; opsd sent its own first, so the client's
// answer must not be echoed (browsers log "Close received after close" and report 1006).
async function refusedRaw(port) {
  const { connect } = await import('node:net');
  return withTimeout(new Promise((resolve, reject) => {
    const sock = connect(port, '127.0.0.1');
    let buf = Buffer.alloc(0), upgraded = false;
    const frames = [];
    sock.on('connect', () => sock.write('GET /api/v1/stream HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n' +
      'Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n'));
    sock.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      if (!upgraded) {
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        if (!buf.slice(0, 12).toString().startsWith('HTTP/1.1 101')) return reject(new Error(`no upgrade: ${buf.slice(0, 40)}`));
        upgraded = true;
        buf = buf.slice(end + 4);
      }
      while (buf.length >= 2 && buf.length >= 2 + (buf[1] & 0x7f)) { /* small frames only */
        const len = buf[1] & 0x7f, op = buf[0] & 0x0f;
        frames.push({ op, code: op === 8 && len >= 2 ? buf.readUInt16BE(2) : null });
        buf = buf.slice(2 + len);
        if (op === 8 && frames.length === 1) /* answer with a masked close (zero key), code 1000 */
          sock.write(Buffer.from([0x88, 0x82, 0, 0, 0, 0, 0x03, 0xe8]));
      }
    });
    sock.on('close', () => {
      const [first, ...rest] = frames;
      resolve(first && first.op === 8
        ? `close ${first.code}, then ${rest.length ? `${rest.length} more frame(s) (op ${rest.map((f) => f.op)})` : 'nothing after our close answer'}`
        : `frames ${JSON.stringify(frames)}`);
    });
    sock.on('error', reject);
  }), 8000, 'the raw refused client');
}

await test('max_clients: 100 connections all served, the 101st is closed with 1013', async () => {
  const clients = [];
  try {
    for (const c of await Promise.allSettled(Array.from({ length: 100 }, () => Client.connect(d.wsUrl)))) {
      if (c.status === 'rejected') throw new Error(`one of 100 connections failed: ${c.reason.message}`);
      clients.push(c.value);
    }
    clients.forEach((c, i) => c.send({ op: 'subscribe', id: `m${i}`, prefix: 'tank1-', interval: '200ms' }));
    await Promise.all(clients.map((c, i) => c.update(`m${i}`, 15000).then((u) => {
      assertEq(u.values.length, 100, `values in the first update of client ${i}`);
    })));
    let status = null;
    try {
      const extra = await Client.connect(d.wsUrl);
      const ci = await withTimeout(extra.closed, 3000, 'close').catch(() => null);
      status = `upgrade accepted (101), then ${ci ? `closed ${ci.code} '${ci.reason}'` : 'left open'}`;
      extra.close();
    } catch (e) {
      status = e.status || e.message;
    }
    assertEq(status, "upgrade accepted (101), then closed 1013 'too many clients, try again later'", 'the 101st client');
    assertEq(await refusedRaw(d.port), 'close 1013, then nothing after our close answer',
      'the close handshake on the wire: one close frame from opsd (none echoed after ours)');
    await healthy();
  } finally {
    clients.forEach((c) => c.close());
    await withTimeout(Promise.all(clients.map((c) => c.closed)), 10000, 'closing 100 clients').catch(() => {
      clients.forEach((c) => c.terminate());
    });
  }
  await waitClients(0);
  const again = await Client.connect(d.wsUrl);
  again.send({ op: 'ping' });
  await again.next((m) => m.op === 'pong', 3000, 'a pong after the others left');
  again.close();
  await waitClients(0);
}, { timeout: 60000 });

await test('300 connections dropped abruptly mid-subscribe; opsd stays healthy and counts 0 clients', async () => {
  for (let round = 0; round < 6; round++) {
    const cs = await Promise.all(Array.from({ length: 50 }, () => Client.connect(d.wsUrl)));
    cs.forEach((c, i) => {
      c.send({ op: 'subscribe', id: 'a', prefix: 'tank1-', interval: '50ms' });
      if (i % 2) c.send('{"op":"subscribe","id":'); // half of them also leave a bad frame
    });
    await sleep(50);
    cs.forEach((c) => c.terminate());
  }
  await healthy();
  await waitClients(0, 8000);
}, { timeout: 60000 });

await test('stream limits: no sanitizer report so far', async () => {
  const rep = work.sanitizerReport();
  assert(!rep, rep);
});

// ---- slow client: its own opsd with 5,000 fast points so kernel buffers fill quickly -----
let big;
try {
  big = await startOpsd(work, {
    tag: '-slow',
    config: (port, dataDir) => standardConfig({
      port, dataDir, limits: '{slow_client_timeout: 2s, max_subscriptions: 64}',
      simExtra: '      - {name: "big-{0000..4999}", type: double, pattern: ramp, period: 100ms, min: 0, max: 1000, resolution: 0.001}',
    }),
  });
} catch (e) {
  failTest('slow client: opsd with 5,000 simulated points starts', e.message);
  await finish();
}

let slowClose = null;
await test('slow client that never reads is disconnected; memory and pending values stay bounded', async () => {
  // Warm up: a normal client takes everything once, so allocations settle.
  const warm = await Client.connect(big.wsUrl);
  warm.send({ op: 'subscribe', id: 'w', prefix: 'big-', interval: '100ms' });
  await warm.update('w');
  await sleep(1500);
  warm.close();
  await withTimeout(warm.closed, 5000, 'warm-up close');
  const rss0 = big.rssKiB();
  const m0 = await metrics(big);
  const slow0 = m0.get('opsd_stream_slow_disconnects_total') || 0;

  const watcher = await Client.connect(big.wsUrl);
  watcher.send({ op: 'subscribe', id: 'one', points: ['big-0001'], interval: '100ms' });
  await watcher.update('one');

  const slow = await Client.connect(big.wsUrl);
  for (let i = 0; i < 4; i++) slow.send({ op: 'subscribe', id: `s${i}`, prefix: 'big-', interval: '50ms' });
  await slow.update('s0');
  slow.ws.pause(); // stop reading: the socket buffers fill, then opsd cannot send
  const t0 = Date.now();

  let rssMax = rss0;
  let pendingMax = 0;
  let maxGap = 0;
  let lastWatch = Date.now();
  let healthMax = 0;
  let disconnected = false;
  while (Date.now() - t0 < 25000) {
    await sleep(250);
    const r = big.rssKiB();
    if (r) rssMax = Math.max(rssMax, r);
    const h0 = Date.now();
    await healthy(big);
    healthMax = Math.max(healthMax, Date.now() - h0);
    const m = await metrics(big);
    pendingMax = Math.max(pendingMax, m.get('opsd_stream_pending_values') || 0);
    const got = watcher.take((x) => x.op === 'update' && x.id === 'one');
    if (got.length) {
      maxGap = Math.max(maxGap, got[0]._t - lastWatch);
      lastWatch = got[got.length - 1]._t;
    } else {
      maxGap = Math.max(maxGap, Date.now() - lastWatch);
    }
    if ((m.get('opsd_stream_slow_disconnects_total') || 0) > slow0) {
      disconnected = true;
      break;
    }
  }
  const took = Date.now() - t0;
  diag(`slow client: disconnected=${disconnected} after ${took} ms; RSS ${rss0} -> max ${rssMax} KiB; ` +
       `max pending values ${pendingMax}; watcher max gap ${maxGap} ms; max /healthz ${healthMax} ms`);
  slow.ws.resume(); // read what was buffered, then the close
  slowClose = await withTimeout(slow.closed, 15000, 'the slow client is closed').catch((e) => ({ error: e.message }));
  diag(`slow client close: ${JSON.stringify(slowClose)}`);
  watcher.close();
  assert(disconnected, `opsd_stream_slow_disconnects_total did not grow within 25 s (${took} ms)`);
  assert(!slowClose.error, slowClose.error);
  assert(rssMax - rss0 < 64 * 1024, `RSS grew by ${rssMax - rss0} KiB (from ${rss0}) while a client did not read`);
  // 4 subscriptions x 5,000 points for the slow client, plus 1 for the watcher.
  assert(pendingMax <= 4 * 5000 + 1, `opsd_stream_pending_values reached ${pendingMax}, above 4 x 5000 + 1`);
  assert(maxGap < 2000, `another client's updates stalled for ${maxGap} ms`);
}, { timeout: 60000 });

await test('slow client: the close carries status 1008 and reason "client too slow"', async () => {
  assert(slowClose && !slowClose.error, 'the slow client was not closed');
  assertEq([slowClose.code, slowClose.reason], [1008, 'client too slow'], 'close status and reason');
});

await test('slow client: opsd healthy afterwards, clients back to 0', async () => {
  await healthy(big);
  await waitClients(0, 5000, big);
});

await test('stream limits: SIGTERM exits 0 (both daemons)', async () => {
  for (const dd of [d, big]) {
    const r = await dd.stop('SIGTERM', 8000);
    assert(!r.killed, `opsd on ${dd.port} did not exit within 8 s of SIGTERM`);
    assertEq([r.code, r.signal], [0, null], `exit status of opsd on ${dd.port}`);
  }
});

await test('stream limits: no sanitizer report in the opsd logs', async () => {
  const rep = work.sanitizerReport();
  assert(!rep, rep);
});

await finish();

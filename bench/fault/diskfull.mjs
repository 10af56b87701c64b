// Disk full, and recovery without a restart: one opsd with history, alarms, registry and
// journal on a small tmpfs. Each round: every module acknowledges some writes, the tmpfs is
// filled to the last byte, each module must answer a clear error (docs/API.md: history 500
// not_durable or 503 busy, alarm and registry 500 not_durable after at most 10 s, journal 507
// insufficient_storage or 503) and answer every request within 15 s; then the space is freed
// and each module must acknowledge writes again within 30 s, without a restart. Every item
// acknowledged (before, during and after the full disk) must be there, then again after a
// kill -9 and a restart at the end.
//
//   node bench/fault/diskfull.mjs [--rounds N] [--size 64m] [--full-s 40]
//
// Needs root (mount -t tmpfs); prints "ok - disk full: skipped: ..." with the reason when it
// cannot mount one. EIO is not tested here: see README.md.
import { spawnSync } from 'node:child_process';
import { mkdirSync, openSync, writeSync, closeSync, unlinkSync, statfsSync } from 'node:fs';
import { join } from 'node:path';
import { Daemon, workDir, port, request, sleep, check, diag, finish, parseArgs, onCleanup, checkHistory, errCode } from './lib.mjs';

const args = parseArgs();
const ROUNDS = Number(args.rounds || 1);
const SIZE = String(args.size || '64m');
const FULL_S = Number(args['full-s'] || 40);
const ANSWER_MS = 15000; // docs/API.md: 10 s for the alarm and registry actions, plus margin
const RECOVER_MS = 30000;

const dir = workDir('diskfull');
const mnt = join(dir, 'small');
mkdirSync(mnt);
if (process.getuid && process.getuid() !== 0) {
  check(`disk full: skipped: needs root to mount a tmpfs (uid ${process.getuid()})`, true);
  await finish();
}
const m = spawnSync('mount', ['-t', 'tmpfs', '-o', `size=${SIZE}`, 'tmpfs', mnt], { encoding: 'utf8' });
if (m.status !== 0) {
  check(`disk full: skipped: cannot mount a tmpfs here (${(m.stderr || m.error || '').toString().trim()})`, true);
  await finish();
}
onCleanup(() => { spawnSync('umount', ['-l', mnt]); });
const data = join(mnt, 'data');
const filler = join(mnt, 'filler');
const freeBytes = () => { const s = statfsSync(mnt); return s.bavail * s.bsize; };

const p = await port();
const d = new Daemon({
  dir, port: p, config: `server: {listen: 127.0.0.1:${p}, data_dir: ${data}}
points:
  - {name: "dh-{000..019}", type: double, writable: true}
  - {name: "dp-{000..019}", type: double, writable: true}
history:
  retention: 2d
  partition: 1h
  commit_interval: 1s
  record:
    - {match: "dh-*", mode: on_change}
alarms:
  - area: Disk
    each: {i: "000..019"}
    group: "disk"
    name: "da-$i"
    expression: "{dp-$i}"
    thresholds:
      - {name: H, op: ">", limit: 0, priority: 2}
registry: {retry_initial: 10m, retry_max: 1h, plugin_timeout: 1s}
journal: {retention: 7d, partition: 1h, disk_floor: 2MB}
`,
});

// What each module acknowledged, and how to write one more item.
const hist = new Map(); // point -> Map ts -> value
let hts = Date.now() - 3 * 3600 * 1000;
const alarmActs = []; // {kind, alarm, comment}
const shelved = new Map(); // alarm -> true/false (acknowledged), undefined after a refused action
const handles = new Set();
const msgs = new Map(); // id -> body
let uid = 0;

const writers = {
  history: async () => {
    const t0 = hts;
    hts += 100;
    const ts = Array.from({ length: 100 }, (_, j) => t0 + j);
    const series = Array.from({ length: 20 }, (_, i) => ({ point: `dh-${String(i).padStart(3, '0')}`, ts, values: ts.map((t) => (t % 100000) / 4 + i) }));
    const r = await request(d, 'POST', '/api/v1/samples', { series }, {}, ANSWER_MS);
    if (r.status === 200) {
      for (const s of series) {
        if (!hist.has(s.point)) hist.set(s.point, new Map());
        s.ts.forEach((t, j) => hist.get(s.point).set(t, s.values[j]));
      }
    }
    return r;
  },
  alarm: async () => {
    const a = `da-${String(uid % 20).padStart(3, '0')}`;
    const kind = shelved.get(a) ? 'unshelve' : 'shelve';
    const comment = `${kind}-${uid++}`;
    const body = kind === 'shelve' ? { alarms: [a], duration: '1d', comment } : { alarms: [a], comment };
    shelved.delete(a);
    const r = await request(d, 'POST', `/api/v1/alarms/${kind}`, body, {}, ANSWER_MS);
    if (r.status === 200 && r.json && r.json[`${kind}d`] === 1) {
      alarmActs.push({ kind, alarm: a, comment });
      shelved.set(a, kind === 'shelve');
    }
    return r;
  },
  registry: async () => {
    const ids = Array.from({ length: 20 }, () => `dk-${uid++}`);
    const r = await request(d, 'POST', '/ncmpInventory/v1/ch', { dmiPlugin: 'http://127.0.0.1:9', createdCmHandles: ids.map((id) => ({ cmHandle: id })) }, {}, ANSWER_MS);
    if (r.status === 200) for (const id of ids) handles.add(id);
    return r;
  },
  journal: async () => {
    const batch = Array.from({ length: 10 }, () => {
      const id = `dj-${uid++}`;
      return { headers: { 'NServiceBus.MessageId': id, 'NServiceBus.ConversationId': 'disk', 'NServiceBus.ProcessingEndpoint': 'Sink' }, body: `${id} `.repeat(500) };
    });
    const r = await request(d, 'POST', '/api/v1/messages', { messages: batch }, {}, ANSWER_MS);
    if (r.status === 200) for (const m of batch) msgs.set(m.headers['NServiceBus.MessageId'], m.body);
    return r;
  },
};
// The clear errors docs/API.md gives for a failed or refused write, per module.
const clearErrors = {
  history: ['500 not_durable', '503 busy'],
  alarm: ['500 not_durable'],
  registry: ['500 INTERNAL_SERVER_ERROR', '503 SERVICE_UNAVAILABLE'], // NCMP's error shape
  journal: ['507 insufficient_storage', '503 not_durable', '503 busy'],
};
const ok2xx = (r) => r.status >= 200 && r.status < 300;

async function verifyAll(when) {
  const [hok, hwhy, hwhat] = await checkHistory(d, hist);
  check(`disk full ${when}: history has every acknowledged sample (${hwhat || ''})`, hok, hwhy);

  const ev = await request(d, 'GET', `/api/v1/alarm-events?from=0&to=${Date.now() + 86400000}&group=disk&limit=100000`, undefined, {}, 60000);
  const have = new Set(ev.status === 200 ? ev.json.events.map((e) => `${e.kind} ${e.alarm} ${e.comment}`) : []);
  const lost = alarmActs.filter((e) => !have.has(`${e.kind} ${e.alarm} ${e.comment}`));
  check(`disk full ${when}: alarm has the event of every acknowledged action (${alarmActs.length})`, ev.status === 200 && !lost.length,
    ev.status !== 200 ? `alarm-events ${ev.status}` : `${lost.length} missing (first: ${lost.slice(0, 3).map((e) => `${e.kind} ${e.alarm}`)})`);
  const sum = await request(d, 'GET', '/api/v1/alarms?state=all&group=disk&limit=100');
  const wrong = sum.status === 200 ? sum.json.alarms.filter((a) => shelved.has(a.alarm) && a.shelved !== shelved.get(a.alarm)) : [];
  check(`disk full ${when}: alarms are in the state of their last acknowledged action`, sum.status === 200 && !wrong.length,
    `${wrong.length} differ (first: ${wrong.slice(0, 3).map((a) => `${a.id} shelved=${a.shelved}`)})`);

  const ids = await request(d, 'POST', '/ncmp/v1/ch/id-searches', {}, {}, 60000);
  const hs = new Set(Array.isArray(ids.json) ? ids.json : []);
  const gone = [...handles].filter((id) => !hs.has(id));
  check(`disk full ${when}: registry has every acknowledged handle (${handles.size})`, ids.status === 200 && !gone.length,
    `${gone.length} missing (first: ${gone.slice(0, 3)})`);

  const conv = await request(d, 'GET', '/api/v1/conversations/disk', undefined, {}, 60000);
  const ms = new Set(conv.status === 200 ? conv.json.messages.map((x) => x.id) : []);
  const miss = [...msgs.keys()].filter((id) => !ms.has(id));
  check(`disk full ${when}: journal has every acknowledged message (${msgs.size})`, (conv.status === 200 || !msgs.size) && !miss.length,
    `${miss.length} missing (first: ${miss.slice(0, 3)})`);
}

// Fills the file system to its last byte; returns the bytes written.
function fill() {
  const fd = openSync(filler, 'a');
  let n = 0;
  for (const size of [1 << 20, 64 << 10, 4096, 512]) {
    const b = Buffer.alloc(size);
    for (;;) {
      try { n += writeSync(fd, b); } catch { break; }
    }
  }
  closeSync(fd);
  return n;
}

try {
  await d.start();
  diag(`tmpfs of ${SIZE} at ${mnt}; ${ROUNDS} round(s); ${FULL_S} s of writes per module while full`);
  for (let round = 1; round <= ROUNDS; round++) {
    const R = `round ${round}`;
    // 1. Before: every module acknowledges.
    for (const [name, w] of Object.entries(writers)) {
      const r = await w().catch((e) => ({ status: 0, text: e.message }));
      check(`disk full ${R}: ${name} acknowledges a write before the disk is full`, ok2xx(r), `${r.status} ${r.text.slice(0, 200)}`);
    }
    // 2. Full: each module writes until it answers a clear error (and a few more), each answer bounded.
    const filled = fill();
    diag(`${R}: filled ${Math.round(filled / 1048576)} MiB, ${freeBytes()} bytes free`);
    const results = await Promise.all(Object.entries(writers).map(async ([name, w]) => {
      const seen = new Map();
      let errors = 0;
      let slowest = 0;
      let unanswered = '';
      let unclear = '';
      const t0 = Date.now();
      while (Date.now() - t0 < FULL_S * 1000 && errors < 5) {
        const t = Date.now();
        let r;
        try {
          r = await w();
        } catch (e) {
          unanswered = unanswered || `${e.message} after ${Date.now() - t} ms`;
          break;
        }
        slowest = Math.max(slowest, r.ms);
        const k = ok2xx(r) ? `${r.status}` : `${r.status} ${errCode(r)}`;
        seen.set(k, (seen.get(k) || 0) + 1);
        if (!ok2xx(r)) {
          errors++;
          if (!clearErrors[name].includes(k)) unclear = unclear || `${k}: ${r.text.slice(0, 160)}`;
          await sleep(200);
        }
      }
      return { name, seen, errors, slowest, unanswered, unclear };
    }));
    const health = await request(d, 'GET', '/healthz', undefined, {}, 5000).catch((e) => ({ status: 0, text: e.message }));
    for (const x of results) {
      const answers = [...x.seen].map(([k, v]) => `${k} x${v}`).join(', ');
      diag(`${R}: ${x.name} while full: ${answers || 'no answer'}; slowest ${Math.round(x.slowest)} ms`);
      check(`disk full ${R}: ${x.name} answers every write within ${ANSWER_MS / 1000} s while full`, !x.unanswered, x.unanswered);
      check(`disk full ${R}: ${x.name} refuses with a clear error (${clearErrors[x.name].join(' or ')}) while full`,
        x.errors > 0 && !x.unclear, x.unclear || (x.unanswered ? `no answer at all (${x.unanswered})` : `no refusal in ${FULL_S} s of writes (${answers})`));
    }
    check(`disk full ${R}: /healthz answers while full`, health.status === 200, `${health.status} ${health.text}`);
    // 3. Space back: each module acknowledges again, without a restart.
    unlinkSync(filler);
    diag(`${R}: filler removed, ${freeBytes()} bytes free`);
    const pid = d.proc.pid;
    await Promise.all(Object.entries(writers).map(async ([name, w]) => {
      const t0 = Date.now();
      let last = null;
      while (Date.now() - t0 < RECOVER_MS) {
        last = await w().catch((e) => ({ status: 0, text: e.message }));
        if (ok2xx(last)) break;
        await sleep(500);
      }
      const ok = last && ok2xx(last);
      if (ok) for (let k = 0; k < 3; k++) await w().catch(() => null);
      check(`disk full ${R}: ${name} acknowledges writes again once space is free, without a restart${ok ? ` (after ${Date.now() - t0} ms)` : ''}`,
        ok, `still ${last && last.status} ${last && last.text.slice(0, 200)} ${RECOVER_MS / 1000} s after the space was freed`);
    }));
    check(`disk full ${R}: the same opsd process throughout`, d.proc.pid === pid && !d.exitInfo, JSON.stringify(d.exitInfo));
    await verifyAll(R);
  }
  // 4. kill -9 and restart: still everything.
  await d.kill9();
  await d.start();
  await verifyAll('after kill -9 and restart');
  const st = await d.stop('SIGTERM', 15000);
  check('disk full: a clean stop at the end (exit 0)', st && st.code === 0 && !st.killed, JSON.stringify(st));
  const rep = d.sanitizerReport();
  check('disk full: no sanitizer report in the log', !rep, rep);
} catch (e) {
  check('disk full: harness ran to the end', false, `${e.message}; log: ${d.logTail(300)}`);
}
await finish();

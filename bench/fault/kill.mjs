// kill -9 under load, per module: a load client records every item opsd acknowledged (a 2xx
// that docs/API.md says comes only once the item is durable), the harness kills opsd with
// SIGKILL at a random moment, restarts it on the same data dir and checks that every item
// acknowledged in that round is there; at the end every item of every round is checked again.
//
//   node bench/fault/kill.mjs [--kills N] [--modules live,history,alarm,registry,journal]
//                             [--min-ms 300] [--max-ms 2500] [--seed S]
//
// Modules and what counts as acknowledged (docs/API.md):
//   live      POST /api/v1/samples (row form, double/int/bool/string points) 200, read back
//             from /api/v1/history; PUT /api/v1/points/NAME 200 (answered once the value is
//             durable in history), read back the same way
//   history   POST /api/v1/samples (columnar form) 200 and POST /write (line protocol) 204
//   alarm     POST /api/v1/alarms/ack, /shelve, /unshelve 200 with a count of 1: the event
//             with its comment in /api/v1/alarm-events, and the shelved flag of the last action
//   registry  POST /ncmpInventory/v1/ch 200: created handles exist, removed ones are gone
//   journal   POST /api/v1/messages 200: every message in its conversation, bodies as sent
import { Daemon, workDir, port, request, sleep, check, diag, finish, parseArgs, summary, fmt, readHistory, checkHistory } from './lib.mjs';

const args = parseArgs();
const KILLS = Number(args.kills || 5);
const MODULES = String(args.modules || 'live,history,alarm,registry,journal').split(',');
const MIN_MS = Number(args['min-ms'] || 300);
const MAX_MS = Number(args['max-ms'] || 2500);
let seed = Number(args.seed || Date.now() % 100000);
diag(`kill -9 under load: ${KILLS} kills per module, modules ${MODULES.join(',')}, seed ${seed}`);
// A small PRNG, so a run can be repeated with --seed.
const rand = () => {
  seed = (seed * 1103515245 + 12345) % 2147483648;
  return seed / 2147483648;
};

const T_BASE = Date.now() - 6 * 3600 * 1000; // sample times: inside the retention, before now
const historyCfg = (match) => `history:
  retention: 2d
  partition: 1h
  commit_interval: 1s
  record:
${match.map((m) => `    - {match: "${m}", mode: on_change}`).join('\n')}
`;

// Each module: config(port, data), load(ctx, round) runs until ctx.stop, check(d, round) checks
// the items acknowledged in that round (returns [ok, reason, figures]), checkAll(d).
function liveModule() {
  const points = [
    ...Array.from({ length: 20 }, (_, i) => ({ name: `lv-${String(i).padStart(2, '0')}`, type: 'double' })),
    { name: 'lv-int', type: 'int' }, { name: 'lv-bool', type: 'bool' }, { name: 'lv-str', type: 'string' },
  ];
  const putPts = Array.from({ length: 5 }, (_, i) => `lp-${i}`);
  const acked = []; // per round: [kind, t0, n] of each acknowledged request
  const puts = []; // per round: [{point, ts, value}]
  let ts = T_BASE;
  const valueOf = (p, t) => {
    switch (p.type) {
      case 'int': return t % 100000;
      case 'bool': return t % 2 === 0;
      case 'string': return `s${t}`;
      default: return (t % 10000) / 4;
    }
  };
  const rows = (kind, t) => points.map((p) => [p.name, valueOf(p, t)]);
  return {
    name: 'live',
    config: (p, data) => `server: {listen: 127.0.0.1:${p}, data_dir: ${data}}
points:
${points.map((x) => `  - {name: "${x.name}", type: ${x.type}, writable: true}`).join('\n')}
  - {name: "lp-{0..4}", type: double, writable: true}
${historyCfg(['lv-*', 'lp-*'])}`,
    async load(ctx, round) {
      const mine = [];
      acked[round] = mine;
      puts[round] = [];
      const poster = async () => {
        while (!ctx.stop) {
          const t0 = ts;
          ts += 5;
          const samples = [];
          for (let t = t0; t < t0 + 5; t++) for (const [point, value] of rows('', t)) samples.push({ point, ts: t, value });
          const r = await request(ctx.d, 'POST', '/api/v1/samples', { samples }).catch(() => null);
          if (r && r.status === 200) {
            mine.push(['', t0, 5]);
            ctx.acked += samples.length;
          } else if (r) ctx.refused(r);
        }
      };
      const putter = async () => {
        while (!ctx.stop) {
          const point = putPts[Math.floor(rand() * putPts.length)];
          const t = ts++;
          const value = (t % 10000) / 8;
          const r = await request(ctx.d, 'PUT', `/api/v1/points/${point}`, { value, ts: t }).catch(() => null);
          if (r && r.status === 200) puts[round].push({ point, ts: t, value });
          else if (r) ctx.refused(r);
        }
      };
      await Promise.all([poster(), poster(), putter()]);
    },
    async check(d, round) {
      const r1 = await checkHistory(d, expand(acked[round], rows));
      if (!r1[0]) return r1;
      const byPoint = new Map();
      for (const x of puts[round]) {
        if (!byPoint.has(x.point)) byPoint.set(x.point, new Map());
        byPoint.get(x.point).set(x.ts, x.value);
      }
      const got = await readHistory(d, [...byPoint.keys()], byPoint);
      let lost = 0;
      for (const [p, m] of byPoint) for (const t of m.keys()) if (!got.get(p).has(t)) lost++;
      this.putsAcked = (this.putsAcked || 0) + puts[round].length;
      this.putsLost = (this.putsLost || 0) + lost;
      if (lost) return [false, `${lost} of ${puts[round].length} acknowledged PUT values not in history`];
      return [true, '', `${r1[2]}; PUT: ${puts[round].length} acknowledged, none lost`];
    },
    checkAll: (d) => checkRounds(d, acked, rows),
    extra() {
      return `PUT values acknowledged ${this.putsAcked || 0}, not in history after the kill ${this.putsLost || 0}`;
    },
  };
}

// Acknowledged samples are kept as [kind, t0, n] per request (each value is a function of the
// point and the time: rows(kind, t) -> [[point, value]...]) and expanded into
// Map point -> Map ts -> value only for a check, one round at a time.
function expand(entries, rows) {
  const m = new Map();
  for (const [kind, t0, n] of entries) {
    for (let t = t0; t < t0 + n; t++) {
      for (const [p, v] of rows(kind, t)) {
        if (!m.has(p)) m.set(p, new Map());
        m.get(p).set(t, v);
      }
    }
  }
  return m;
}

async function checkRounds(d, rounds, rows) {
  let n = 0;
  for (let round = 0; round < rounds.length; round++) {
    const want = expand(rounds[round] || [], rows);
    const [ok, why] = await checkHistory(d, want);
    if (!ok) return [false, `round ${round + 1}: ${why}`];
    for (const m of want.values()) n += m.size;
  }
  return [true, '', `${n} samples`];
}

function historyModule() {
  const N_SERIES = 50;
  const acked = []; // per round: [kind, t0, n] of each acknowledged request
  let ts = T_BASE;
  const series_ = (i) => `hs-${String(i).padStart(3, '0')}`;
  const colValue = (i, t) => (t % 100000) / 8 + i;
  const lineValue = (h, t) => (t % 100000) / 4 + h;
  const rows = (kind, t) => (kind === 'c'
    ? Array.from({ length: N_SERIES }, (_, i) => [series_(i), colValue(i, t)])
    : Array.from({ length: 5 }, (_, h) => [`lp.h${h}.v`, lineValue(h, t)]));
  return {
    name: 'history',
    config: (p, data) => `server: {listen: 127.0.0.1:${p}, data_dir: ${data}}
points:
  - {name: "hs-{000..049}", type: double, writable: true}
  - {name: "lp.h{0..4}.v", type: double, writable: true}
${historyCfg(['hs-*', 'lp.*'])}`,
    async load(ctx, round) {
      const mine = [];
      acked[round] = mine;
      const columnar = async () => {
        while (!ctx.stop) {
          const t0 = ts;
          ts += 10;
          const tsl = Array.from({ length: 10 }, (_, j) => t0 + j);
          const series = Array.from({ length: N_SERIES }, (_, i) => ({
            point: series_(i), ts: tsl, values: tsl.map((t) => colValue(i, t)),
          }));
          const r = await request(ctx.d, 'POST', '/api/v1/samples', { series }).catch(() => null);
          if (r && r.status === 200) {
            mine.push(['c', t0, 10]);
            ctx.acked += N_SERIES * tsl.length;
          } else if (r) ctx.refused(r);
        }
      };
      const lines = async () => {
        while (!ctx.stop) {
          const t0 = ts;
          ts += 20;
          const lp = [];
          for (let t = t0; t < t0 + 20; t++) for (let h = 0; h < 5; h++) lp.push(`lp,host=h${h} v=${lineValue(h, t)} ${t}`);
          const r = await request(ctx.d, 'POST', '/write?precision=ms', lp.join('\n'), { 'Content-Type': 'text/plain' }).catch(() => null);
          if (r && r.status === 204) {
            mine.push(['l', t0, 20]);
            ctx.acked += lp.length;
          } else if (r) ctx.refused(r);
        }
      };
      await Promise.all([columnar(), lines()]);
    },
    check: (d, round) => checkHistory(d, expand(acked[round], rows)),
    checkAll: (d) => checkRounds(d, acked, rows),
  };
}

function alarmModule() {
  const N = 40;
  const names = Array.from({ length: N }, (_, i) => `fa-${String(i).padStart(3, '0')}`);
  const events = []; // per round: [{kind, alarm, comment}]
  const windows = []; // per round: [from, to] in ms
  // Per alarm: the last shelve/unshelve action tried and whether it was acknowledged.
  const shelf = new Map();
  let uid = 0;
  const post = (d, what, body) => request(d, 'POST', `/api/v1/alarms/${what}`, body).catch(() => null);
  return {
    name: 'alarm',
    config: (p, data) => `server: {listen: 127.0.0.1:${p}, data_dir: ${data}}
points:
  - {name: "fp-{000..039}", type: double, writable: true}
alarms:
  - area: Fault
    each: {i: "000..039"}
    group: "fault"
    name: "fa-$i"
    expression: "{fp-$i}"
    thresholds:
      - {name: H, op: ">", limit: 0, priority: 2, message: "fault test {value}"}
`,
    async load(ctx, round) {
      const mine = [];
      events[round] = mine;
      windows[round] = [Date.now() - 5000, 0];
      const worker = async (w) => {
        for (let k = w; !ctx.stop; k += 4) {
          const a = names[k % N];
          const pt = `fp-${a.slice(3)}`;
          await request(ctx.d, 'POST', '/api/v1/samples', { samples: [{ point: pt, value: 1 }] }).catch(() => null);
          const steps = [
            ['ack', { alarms: [a], comment: `ack-${round}-${uid++}` }, 'acknowledged'],
            ['shelve', { alarms: [a], duration: '1d', comment: `shelve-${round}-${uid++}` }, 'shelved'],
            ['unshelve', { alarms: [a], comment: `unshelve-${round}-${uid++}` }, 'unshelved'],
          ];
          // Sometimes leave the alarm shelved, so both final states are checked.
          if (rand() < 0.3) steps.pop();
          for (const [kind, body, key] of steps) {
            if (ctx.stop) break;
            if (kind !== 'ack') shelf.set(a, { kind, acked: false });
            const r = await post(ctx.d, kind, body);
            if (r && r.status === 200 && r.json && r.json[key] === 1) {
              mine.push({ kind, alarm: a, comment: body.comment });
              ctx.acked++;
              if (kind !== 'ack') shelf.set(a, { kind, acked: true });
            } else if (r && r.status !== 200) ctx.refused(r);
          }
          await request(ctx.d, 'POST', '/api/v1/samples', { samples: [{ point: pt, value: 0 }] }).catch(() => null);
        }
      };
      await Promise.all([0, 1, 2, 3].map(worker));
      windows[round][1] = Date.now() + 5000;
    },
    // The events of one round: read over the round's time window (at most 100,000 a query).
    async checkEvents(d, round) {
      const want = events[round];
      const [from, to] = windows[round];
      const r = await request(d, 'GET', `/api/v1/alarm-events?from=${from}&to=${to}&group=fault&limit=100000`, undefined, {}, 60000);
      if (r.status !== 200) return [false, `alarm-events: ${r.status} ${r.text.slice(0, 200)}`];
      const have = new Set(r.json.events.filter((e) => e.comment).map((e) => `${e.kind} ${e.alarm} ${e.comment}`));
      const missing = want.filter((e) => !have.has(`${e.kind} ${e.alarm} ${e.comment}`));
      if (r.json.more) diag('alarm-events: more than 100,000 events in a round, only the first read');
      if (missing.length) return [false, `${missing.length} of ${want.length} acknowledged actions without their event (first: ${missing.slice(0, 3).map((e) => `${e.kind} ${e.alarm} '${e.comment}'`).join(', ')})`];
      const kinds = {};
      for (const e of want) kinds[e.kind] = (kinds[e.kind] || 0) + 1;
      return [true, '', `${want.length} actions: ${Object.entries(kinds).map(([k, v]) => `${k} ${v}`).join(', ')}`];
    },
    async check(d, round) {
      const r = await this.checkEvents(d, round);
      if (!r[0]) return r;
      // The shelved flag of alarms whose last shelve/unshelve was acknowledged.
      const s = await request(d, 'GET', '/api/v1/alarms?state=all&group=fault&limit=1000');
      if (s.status !== 200) return [false, `summary: ${s.status}`];
      const bad = [];
      for (const row of s.json.alarms) {
        const last = shelf.get(row.alarm);
        if (last && last.acked && row.shelved !== (last.kind === 'shelve')) bad.push(`${row.id} shelved=${row.shelved} after an acknowledged ${last.kind}`);
      }
      if (bad.length) return [false, `${bad.length} alarms not in the state of their last acknowledged action (${bad.slice(0, 3).join(', ')})`];
      return r;
    },
    async checkAll(d) {
      for (let round = 0; round < events.length; round++) {
        const r = await this.checkEvents(d, round);
        if (!r[0]) return [false, `round ${round + 1}: ${r[1]}`];
      }
      return [true, '', `${events.flat().length} actions`];
    },
  };
}

function registryModule() {
  const created = new Map(); // id -> round acknowledged
  const removed = new Set(); // acknowledged removals
  const tried = new Set(); // removals sent, acknowledged or not
  const order = []; // created ids, for picking removals
  let n = 0;
  return {
    name: 'registry',
    // The plugin is a closed port: every sync fails and the handles wait, LOCKED, for a retry
    // far away, so the registry's work is the registrations themselves.
    config: (p, data) => `server: {listen: 127.0.0.1:${p}, data_dir: ${data}}
registry: {retry_initial: 10m, retry_max: 1h, plugin_timeout: 1s, sync_concurrency: 1}
`,
    async load(ctx, round) {
      const worker = async () => {
        while (!ctx.stop) {
          const ids = Array.from({ length: 20 }, () => `fh-${String(n++).padStart(7, '0')}`);
          const rm = [];
          for (let i = 0; i < 3 && order.length; i++) {
            const id = order[Math.floor(rand() * order.length)];
            if (!tried.has(id) && !rm.includes(id)) rm.push(id);
          }
          for (const id of rm) tried.add(id);
          const body = { dmiPlugin: 'http://127.0.0.1:9', createdCmHandles: ids.map((id) => ({ cmHandle: id, publicCmHandleProperties: { round: String(round) } })), removedCmHandles: rm };
          const r = await request(ctx.d, 'POST', '/ncmpInventory/v1/ch', body).catch(() => null);
          if (r && r.status === 200) {
            for (const id of ids) {
              created.set(id, round);
              order.push(id);
            }
            for (const id of rm) removed.add(id);
            ctx.acked += ids.length + rm.length;
          } else if (r) ctx.refused(r);
        }
      };
      await worker();
    },
    async checkRounds(d, rounds) {
      const r = await request(d, 'POST', '/ncmp/v1/ch/id-searches', {}, {}, 60000);
      if (r.status !== 200 || !Array.isArray(r.json)) return [false, `id-searches: ${r.status} ${r.text.slice(0, 200)}`];
      const have = new Set(r.json);
      const missing = [];
      const back = [];
      let nc = 0;
      let nr = 0;
      for (const [id, rd] of created) {
        if (!rounds.has(rd)) continue;
        if (tried.has(id) && !removed.has(id)) continue; // a removal in flight at the kill
        if (removed.has(id)) {
          nr++;
          if (have.has(id)) back.push(id);
        } else {
          nc++;
          if (!have.has(id)) missing.push(id);
        }
      }
      if (missing.length) return [false, `${missing.length} of ${nc} acknowledged handles missing (first: ${missing.slice(0, 3)})`];
      if (back.length) return [false, `${back.length} handles whose removal was acknowledged are back (first: ${back.slice(0, 3)})`];
      return [true, '', `${nc} handles, ${nr} removals`];
    },
    check(d, round) {
      return this.checkRounds(d, new Set([round]));
    },
    checkAll(d) {
      return this.checkRounds(d, { has: () => true });
    },
  };
}

function journalModule() {
  const acked = []; // per round: the numbers of the acknowledged messages
  let n = 0;
  const idOf = (i) => `fj-${String(i).padStart(8, '0')}`;
  const bodyOf = (i, round) => (i % 10 ? JSON.stringify({ i, round }) : JSON.stringify({ i, pad: `${i}-`.repeat(3000).slice(0, 20000) }));
  const BASE = Date.now() - 3600000;
  const wire = (ms) => new Date(ms).toISOString().replace('T', ' ').replace(/\.(\d{3})Z$/, ':$1000 Z');
  // Conversations of 2,000 messages (an answer lists at most 10,000).
  const convOf = (i) => `fc-${Math.floor(i / 2000)}`;
  const msg = (i, round) => ({
    headers: {
      'NServiceBus.MessageId': idOf(i),
      'NServiceBus.ConversationId': convOf(i),
      'NServiceBus.EnclosedMessageTypes': 'Fault.Test, Fault',
      'NServiceBus.OriginatingEndpoint': 'Load',
      'NServiceBus.ProcessingEndpoint': 'Sink',
      'NServiceBus.ContentType': 'application/json',
      'NServiceBus.TimeSent': wire(BASE + i),
      'NServiceBus.ProcessingStarted': wire(BASE + i + 1),
      'NServiceBus.ProcessingEnded': wire(BASE + i + 2),
    },
    body: bodyOf(i, round),
  });
  return {
    name: 'journal',
    config: (p, data) => `server: {listen: 127.0.0.1:${p}, data_dir: ${data}}
journal: {retention: 7d, partition: 1h, disk_floor: 0}
`,
    async load(ctx, round) {
      const mine = [];
      acked[round] = mine;
      const worker = async () => {
        while (!ctx.stop) {
          const i0 = n;
          n += 25;
          const batch = Array.from({ length: 25 }, (_, k) => msg(i0 + k, round));
          const r = await request(ctx.d, 'POST', '/api/v1/messages', { messages: batch }).catch(() => null);
          if (r && r.status === 200) {
            for (let k = 0; k < 25; k++) mine.push(i0 + k);
            ctx.acked += batch.length;
          } else if (r) ctx.refused(r);
        }
      };
      await Promise.all([worker(), worker()]);
    },
    async checkRound(d, round, bodies) {
      const want = acked[round];
      if (!want || !want.length) return [true, '', '0 messages'];
      const have = new Set();
      for (const c of new Set(want.map(convOf))) {
        const r = await request(d, 'GET', `/api/v1/conversations/${c}`, undefined, {}, 60000);
        if (r.status !== 200) return [false, `conversation ${c}: ${r.status} ${r.text.slice(0, 200)}`];
        for (const m of r.json.messages) have.add(m.id);
      }
      const missing = want.map(idOf).filter((id) => !have.has(id));
      if (missing.length) return [false, `round ${round + 1}: ${missing.length} of ${want.length} acknowledged messages missing (first: ${missing.slice(0, 3)})`];
      let nb = 0;
      if (bodies) {
        for (const i of want) {
          if (i % 10) continue;
          const id = idOf(i);
          const body = bodyOf(i, round);
          const b = await request(d, 'GET', `/api/v1/messages/${id}/body`);
          if (b.status !== 200 || b.text !== body) return [false, `body of ${id}: ${b.status}, ${b.text.length} bytes, not as sent`];
          nb++;
        }
      }
      return [true, '', `${want.length} messages, ${nb} bodies of 20 KB read back`];
    },
    check(d, round) {
      return this.checkRound(d, round, true);
    },
    async checkAll(d) {
      let total = 0;
      for (let round = 0; round < acked.length; round++) {
        const r = await this.checkRound(d, round, false);
        if (!r[0]) return r;
        total += acked[round] ? acked[round].length : 0;
      }
      return [true, '', `${total} messages`];
    },
  };
}

const factories = { live: liveModule, history: historyModule, alarm: alarmModule, registry: registryModule, journal: journalModule };
const figures = [];

for (const name of MODULES) {
  const mod = factories[name] && factories[name]();
  if (!mod) {
    check(`kill: module ${name}`, false, `unknown module (${Object.keys(factories).join(', ')})`);
    continue;
  }
  const dir = workDir(`kill-${name}`);
  const p = await port();
  const d = new Daemon({ dir, port: p, config: mod.config(p, `${dir}/data`) });
  const restarts = [];
  const killedAfter = [];
  const refusals = new Map();
  let acked = 0;
  let emptyRounds = 0;
  let okRounds = 0;
  let firstFailure = '';
  const t0 = Date.now();
  try {
    restarts.push(await d.start());
    for (let round = 0; round < KILLS; round++) {
      const ctx = {
        d, stop: false, acked: 0,
        refused(r) {
          const k = `${r.status} ${(r.json && r.json.error && r.json.error.code) || ''}`.trim();
          refusals.set(k, (refusals.get(k) || 0) + 1);
        },
      };
      const loading = mod.load(ctx, round);
      const wait = MIN_MS + rand() * (MAX_MS - MIN_MS);
      await sleep(wait);
      const e = await d.kill9();
      killedAfter.push(wait);
      ctx.stop = true;
      await loading;
      if (e.signal !== 'SIGKILL') throw new Error(`opsd was not killed by SIGKILL: ${JSON.stringify(e)}`);
      acked += ctx.acked;
      if (!ctx.acked) emptyRounds++;
      restarts.push(await d.start());
      const [ok, why, what] = await mod.check(d, round);
      if (ok) okRounds++;
      else if (!firstFailure) firstFailure = `round ${round + 1} (killed after ${Math.round(wait)} ms): ${why}`;
      if (!ok || round < 3 || (round + 1) % 25 === 0 || round === KILLS - 1) {
        diag(`${name} round ${round + 1}/${KILLS}: killed after ${Math.round(wait)} ms, ${ctx.acked} acknowledged; ${ok ? `all there (${what})` : `LOST: ${why}`}`);
      }
    }
    check(`kill -9 ${name}: every acknowledged item there after each of ${KILLS} kills`, okRounds === KILLS,
      `${KILLS - okRounds} of ${KILLS} rounds lost acknowledged items; first: ${firstFailure}`);
    const [ok, why, what] = await mod.checkAll(d);
    check(`kill -9 ${name}: every item of every round there at the end (${what || 'see reason'})`, ok, why);
    check(`kill -9 ${name}: the load got items acknowledged (${KILLS - emptyRounds} of ${KILLS} rounds)`, acked > 0,
      'nothing was acknowledged: the checks prove nothing');
    const st = await d.stop('SIGTERM', 15000);
    check(`kill -9 ${name}: a clean stop at the end (exit 0)`, st && st.code === 0 && !st.killed, JSON.stringify(st));
    const rep = d.sanitizerReport();
    check(`kill -9 ${name}: no sanitizer report in the log`, !rep, rep);
  } catch (e) {
    check(`kill -9 ${name}: harness ran to the end`, false, `${e.message}`);
    await d.stop('SIGKILL', 1000);
  }
  const rs = summary(restarts.slice(1));
  const fig = {
    module: name, kills: killedAfter.length, acked, okRounds, seconds: Math.round((Date.now() - t0) / 1000),
    restart: rs, refusals: [...refusals].map(([k, v]) => `${k}: ${v}`).join(', ') || 'none', extra: mod.extra ? mod.extra() : '',
  };
  figures.push(fig);
  diag(`${name}: ${fig.kills} kills in ${fig.seconds} s, ${acked} items acknowledged, restart to healthy p50 ${fmt(rs.p50, 0)} ms max ${fmt(rs.max, 0)} ms; refused answers: ${fig.refusals}${fig.extra ? `; ${fig.extra}` : ''}`);
}

diag('| module | kills | items acknowledged | rounds with nothing lost | restart to healthy p50 / max ms | refused answers | time s |');
diag('| --- | ---: | ---: | ---: | ---: | --- | ---: |');
for (const f of figures) diag(`| ${f.module} | ${f.kills} | ${f.acked} | ${f.okRounds} / ${f.kills} | ${fmt(f.restart.p50, 0)} / ${fmt(f.restart.max, 0)} | ${f.refusals} | ${f.seconds} |`);
await finish();

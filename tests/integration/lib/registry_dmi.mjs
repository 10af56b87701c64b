// A test DMI plugin (the southbound API that ONAP CPS-NCMP calls), for the registry's
// integration tests and benchmarks. It serves synthetic devices:
//   POST /dmi/v1/ch/{id}/modules          {"cmHandleProperties":{..},"moduleSetTag":".."}
//        -> {"schemas":[{"moduleName","revision","namespace"}]}
//   POST /dmi/v1/ch/{id}/moduleResources  {"data":{"modules":[{"name","revision"}]},..}
//        -> [{"moduleName","revision","yangSource"}]
//   POST /dmi/v1/ch/{id}/data/ds/{datastore}?resourceIdentifier=..&options=..
//        {"operation","dataType","data","cmHandleProperties","moduleSetTag"}
//        -> read: {"ietf-netconf-monitoring:netconf-state":{...}} echoing what was asked;
//           create/update/patch/delete: {} (the request is kept in stats.data)
//   GET  /actuator/health -> {"status":"UP"} (dmi.setHealth('DOWN'): {"status":"DOWN"}, 503)
// A device's modules follow its moduleSetTag: two shared modules plus `perTag` modules named
// after the tag (untagged devices: the shared ones plus one named after the handle id's last
// digit, so untagged devices share sets too). Fault injection: a delay per request, a status
// to answer with (for the next `count` requests, or for ids matching a pattern), a hang
// (never answer: the client's timeout), an answer that is not JSON (invalidJson). Counters:
// requests by kind, modules served by name, data operations (stats.data, last 1000 kept).
//
// Use in a test: `const dmi = await startDmi({delayMs: 0})`, dmi.url, dmi.stats, dmi.fault({...}),
// await dmi.close(). Standalone (benchmarks): node registry_dmi.mjs [--port N] [--delay MS]
// [--delay-first N] [--fail-rate F]; prints its URL and serves until killed.
import { createServer } from 'node:http';

const SHARED = [
  { moduleName: 'ietf-yang-types', revision: '2013-07-15', namespace: 'urn:ietf:params:xml:ns:yang:ietf-yang-types' },
  { moduleName: 'ietf-inet-types', revision: '2013-07-15', namespace: 'urn:ietf:params:xml:ns:yang:ietf-inet-types' },
];

export function modulesFor(id, tag, perTag = 3) {
  const mods = [...SHARED];
  if (tag) {
    for (let i = 1; i <= perTag; i++) {
      mods.push({ moduleName: `${tag}-module-${i}`, revision: '2024-01-01', namespace: `urn:test:${tag}:${i}` });
    }
  } else {
    const d = id.slice(-1);
    mods.push({ moduleName: `untagged-${d}`, revision: '2024-01-01', namespace: `urn:test:untagged:${d}` });
  }
  return mods;
}

export function startDmi({ port = 0, delayMs = 0, delayFirst = 0, failRate = 0, perTag = 3 } = {}) {
  const stats = { modules: 0, moduleResources: 0, served: {}, byTag: {}, requests: [], dataOps: 0, data: [] };
  let fault = { status: 0, count: 0, idPattern: null, hang: false, invalidJson: false, delayMs };
  let handled = 0;
  const hanging = new Set();
  let health = 'UP';
  const server = createServer((req, res) => {
    if (req.method === 'GET' && req.url === '/actuator/health') {
      stats.health = (stats.health || 0) + 1;
      res.writeHead(health === 'UP' ? 200 : 503, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify({ status: health }));
      req.resume();
      return;
    }
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', async () => {
      const dm = req.url.match(/^\/dmi\/v1\/ch\/([^/]+)\/data\/ds\/([^/?]+)(\?.*)?$/);
      if (req.method === 'POST' && dm) {
        const id = decodeURIComponent(dm[1]);
        const q = new URLSearchParams(dm[3] || '');
        let j;
        try { j = JSON.parse(body); } catch {
          res.writeHead(400, { 'Content-Type': 'application/json' });
          res.end('{"status":"400","message":"Bad Request","details":"body is not JSON"}');
          return;
        }
        stats.dataOps++;
        const rec = { id, datastore: decodeURIComponent(dm[2]), resourceIdentifier: q.get('resourceIdentifier'),
          options: q.get('options'), topic: q.get('topic'), body: j, t: Date.now() };
        stats.data.push(rec);
        if (stats.data.length > 1000) stats.data.shift();
        if (fault.delayMs) await new Promise((r) => setTimeout(r, fault.delayMs));
        const hit = fault.idPattern ? fault.idPattern.test(id) : fault.count > 0;
        if (hit && fault.hang) { hanging.add(res); return; }
        if (hit && fault.status) {
          if (!fault.idPattern && fault.count > 0) fault.count--;
          res.writeHead(fault.status, { 'Content-Type': 'application/json' });
          res.end(`{"status":"${fault.status}","message":"injected","details":"the device refused"}`);
          return;
        }
        if (hit && fault.invalidJson) {
          res.writeHead(200, { 'Content-Type': 'application/json' });
          res.end('this is not json');
          return;
        }
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify(j.operation === 'read'
          ? { 'ietf-netconf-monitoring:netconf-state': { cmHandle: id, datastore: rec.datastore,
            resourceIdentifier: rec.resourceIdentifier, options: rec.options, moduleSetTag: j.moduleSetTag,
            cmHandleProperties: j.cmHandleProperties } }
          : {}));
        return;
      }
      const m = req.url.match(/^\/dmi\/v1\/ch\/([^/]+)\/(modules|moduleResources)$/);
      if (req.method !== 'POST' || !m) {
        res.writeHead(404, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify({ status: '404', message: 'Resource Not Found' }));
        return;
      }
      const id = decodeURIComponent(m[1]);
      const kind = m[2];
      let j = {};
      try { j = JSON.parse(body || '{}'); } catch {
        res.writeHead(400);
        res.end('{"status":"400","message":"Bad Request"}');
        return;
      }
      const n = handled++;
      stats[kind]++;
      if (stats.requests.length < 100000) stats.requests.push({ kind, id, tag: j.moduleSetTag || '', t: Date.now() });
      if (kind === 'modules') stats.byTag[j.moduleSetTag || ''] = (stats.byTag[j.moduleSetTag || ''] || 0) + 1;
      const delay = delayFirst && n >= delayFirst ? 0 : fault.delayMs;
      if (delay) await new Promise((r) => setTimeout(r, delay));
      const hit = fault.idPattern ? fault.idPattern.test(id) : fault.count > 0;
      if (hit && fault.hang) {
        hanging.add(res);
        return; // never answered
      }
      if ((hit && fault.status) || (failRate && Math.random() < failRate)) {
        if (!fault.idPattern && fault.count > 0) fault.count--;
        res.writeHead(hit && fault.status ? fault.status : 500, { 'Content-Type': 'application/json' });
        res.end('{"status":"500","message":"Internal Server Error","details":"injected"}');
        return;
      }
      if (!fault.idPattern && fault.count > 0) fault.count--;
      const all = modulesFor(id, j.moduleSetTag || '', perTag);
      let out;
      if (kind === 'modules') {
        out = { schemas: all };
      } else {
        const want = (j.data && j.data.modules) || [];
        out = [];
        for (const w of want) {
          const found = all.find((x) => x.moduleName === w.name && x.revision === w.revision);
          if (!found) continue;
          stats.served[w.name] = (stats.served[w.name] || 0) + 1;
          out.push({ moduleName: w.name, revision: w.revision,
            yangSource: `module ${w.name} {\n  namespace "${found.namespace}";\n  prefix x;\n  revision ${w.revision};\n}\n` });
        }
      }
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify(out));
    });
  });
  return new Promise((resolve) => {
    server.listen(port, '127.0.0.1', () => {
      const url = `http://127.0.0.1:${server.address().port}`;
      resolve({
        url,
        stats,
        // fault({status, count, idPattern, hang, delayMs}); fault({}) clears it
        setHealth(h) { health = h; },
        fault(f) { fault = { status: 0, count: 0, idPattern: null, hang: false, invalidJson: false, delayMs, ...f }; },
        reset() {
          stats.modules = 0; stats.moduleResources = 0; stats.served = {}; stats.byTag = {}; stats.requests = [];
          stats.dataOps = 0; stats.data = [];
        },
        close() {
          for (const r of hanging) r.destroy();
          server.closeAllConnections();
          return new Promise((r) => server.close(() => r()));
        },
      });
    });
  });
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const arg = (k, d) => {
    const i = process.argv.indexOf(k);
    return i > 0 ? Number(process.argv[i + 1]) : d;
  };
  const dmi = await startDmi({ port: arg('--port', 0), delayMs: arg('--delay', 0), delayFirst: arg('--delay-first', 0),
    failRate: arg('--fail-rate', 0) });
  console.log(dmi.url);
}

// Overview: the plant first (alarms by area and priority, what needs acknowledging), then the
// server: health, uptime, ingest and fan-out rates, queue depths and store sizes, from
// /healthz, /api/v1/status and /metrics every 2 s. Rates are counter deltas between two
// scrapes; the chart shows the last hour as the server keeps it (/api/v1/status/rates, one
// point per 10 s) and adds the page's own 2-second points after it. Queue and store figures are
// taken from every metric whose name says so, so modules that add theirs show up without a
// change.
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { getJSON, getText, parseMetrics, type Metrics, type Status } from '../api';
import { axisTheme, fmtBytes, fmtDuration, fmtRate, fmtTime, h, timeAxisValues, type Page } from '../util';

const POLL_MS = 2000;
const WINDOW_MS = 3600e3; /* the rate chart: the last hour */
const AREAS_MAX = 12;

const rates: [string, string, string][] = [
  ['Point updates (ingest)', 'opsd_point_updates_total', 'points changed per second in the point table'],
  ['Samples via API', 'opsd_samples_ingested_total', 'samples posted or written through the API'],
  ['Stream values (fan-out)', 'opsd_stream_values_sent_total', 'values sent to stream clients'],
  ['Stream frames', 'opsd_stream_frames_sent_total', 'WebSocket frames sent'],
  ['Stream bytes', 'opsd_stream_bytes_sent_total', 'bytes sent to stream clients'],
  ['History recorded', 'opsd_history_recorded_total', 'samples handed to the history recorder'],
  ['History durable', 'opsd_history_durable_total', 'samples made durable'],
];

function sumMetric(m: Metrics, name: string): number | undefined {
  let found = false;
  let s = 0;
  for (const [k, v] of m) {
    if (k === name || k.startsWith(name + '{')) {
      found = true;
      s += v;
    }
  }
  return found ? s : undefined;
}

export function overviewPage(): Page {
  let timer = 0;
  let stopped = false;
  let prev: { t: number; m: Metrics } | null = null;
  let plot: uPlot | null = null;
  let ro: ResizeObserver | null = null;
  const hist: number[][] = [[], [], []]; /* x in ms, ingest, fan-out */
  let onTheme: (() => void) | null = null;

  return {
    title: 'Overview',
    mount(root) {
      const health = h('span', { class: 'badge', id: 'ov-health' }, '…');
      const facts = h('dl', { class: 'facts', id: 'ov-facts' });
      const rateTable = h('tbody', { id: 'ov-rates' });
      const queueTable = h('tbody', { id: 'ov-queues' });
      const storeTable = h('tbody', { id: 'ov-stores' });
      const driverTable = h('tbody', { id: 'ov-drivers' });
      const alarmTable = h('tbody', { id: 'ov-alarms' });
      const alarmCard = h('section', { class: 'card', hidden: true }, h('h2', {}, h('a', { href: '#/alarms?state=active' }, 'Active alarms')), h('table', { class: 'kv' }, alarmTable));
      const chartBox = h('div', { class: 'chart small', id: 'ov-chart' });
      const areaTable = h('tbody', { id: 'ov-areas' });
      const areaCard = h('section', { class: 'card', hidden: true, id: 'ov-plant' },
        h('h2', {}, h('a', { href: '#/alarms' }, 'Alarms by area')),
        h('table', { class: 'list' }, h('thead', {}, h('tr', {}, h('th', {}, 'Area'), h('th', { class: 'num' }, 'Active'),
          h('th', { class: 'num', title: 'Unacknowledged' }, 'Unack.'), h('th', { class: 'num', title: 'The most urgent priority' }, 'Top'))), areaTable));
      const err = h('p', { class: 'msg', role: 'alert' });
      root.append(
        h('div', { class: 'title' }, h('h1', {}, 'Overview'), health),
        err,
        h('div', { class: 'grid' },
          areaCard,
          alarmCard,
          h('section', { class: 'card' }, h('h2', {}, 'Server'), facts),
          h('section', { class: 'card' }, h('h2', {}, 'Rates'),
            h('table', { class: 'kv' }, rateTable)),
          h('section', { class: 'card wide' }, h('h2', {}, 'Ingest and fan-out, last hour'), chartBox),
          h('section', { class: 'card' }, h('h2', {}, 'Queue depths'), h('table', { class: 'kv' }, queueTable)),
          h('section', { class: 'card' }, h('h2', {}, 'Stores'), h('table', { class: 'kv' }, storeTable)),
          h('section', { class: 'card' }, h('h2', {}, 'Drivers'),
            h('table', { class: 'list' }, h('thead', {}, h('tr', {}, h('th', {}, 'Name'), h('th', {}, 'Type'), h('th', { class: 'num' }, 'Points'), h('th', { class: 'num' }, 'Samples'))), driverTable)),
        ),
      );

      const makePlot = () => {
        plot?.destroy();
        chartBox.replaceChildren();
        const w = Math.max(200, chartBox.clientWidth);
        const th = axisTheme();
        plot = new uPlot({
          width: w,
          height: 180,
          ms: 1,
          series: [
            { value: (_u, v) => (v === null ? '' : fmtTime(v)) },
            { label: 'ingest', stroke: '#1f77b4', value: (_u, v) => fmtRate(v ?? undefined) },
            { label: 'fan-out', stroke: '#d62728', value: (_u, v) => fmtRate(v ?? undefined) },
          ],
          axes: [{ ...th, values: timeAxisValues, space: 80 }, { ...th, size: 70, values: (_u, vals) => vals.map((v) => fmtRate(v)) }],
          scales: { x: { time: true, range: () => [Date.now() - WINDOW_MS, Date.now()] } },
          cursor: { drag: { x: false, y: false } },
          legend: { live: false },
        }, hist as uPlot.AlignedData, chartBox);
        chartBox.dataset.rows = String(hist[0].length);
      };
      makePlot();
      onTheme = makePlot;
      window.addEventListener('opsd-theme', makePlot);
      /* the last hour, as the server kept it */
      getJSON<{ interval_ms: number; rates: [number, number, number, number][] }>('/api/v1/status/rates').then((r) => {
        if (stopped) return;
        const first = hist[0].length ? hist[0][0] : Infinity;
        const old = r.rates.filter((x) => x[0] < first);
        hist[0].unshift(...old.map((x) => x[0]));
        hist[1].unshift(...old.map((x) => x[1]));
        hist[2].unshift(...old.map((x) => x[2]));
        plot?.setData(hist as uPlot.AlignedData);
        chartBox.dataset.rows = String(hist[0].length);
        chartBox.dataset.serverRows = String(old.length);
      }, () => { /* an older server: the page's own points only */ });
      ro = new ResizeObserver(() => plot?.setSize({ width: Math.max(200, chartBox.clientWidth), height: 180 }));
      ro.observe(chartBox);

      const row = (label: string, value: string, title = '') =>
        h('tr', { title }, h('th', { scope: 'row' }, label), h('td', { class: 'num' }, value));

      const poll = async () => {
        try {
          const t = performance.now();
          const [okHealth, st, mtext] = await Promise.all([
            fetch('/healthz').then((r) => (r.ok ? r.json() : { status: `HTTP ${r.status}` })).catch(() => ({ status: 'unreachable' })) as Promise<Record<string, string>>,
            getJSON<Status>('/api/v1/status'),
            getText('/metrics'),
          ]);
          const m = parseMetrics(mtext);
          err.textContent = '';
          /* {"status":"ok"}, or "degraded" with the reason by module (e.g. the journal paused) */
          const hs = okHealth.status;
          const why = Object.entries(okHealth).filter(([k]) => k !== 'status').map(([k, v]) => `${k}: ${v}`).join('; ');
          health.textContent = hs === 'ok' ? 'healthy' : `${hs}${why ? ' (' + why + ')' : ''}`;
          health.dataset.state = hs === 'ok' ? 'good' : hs === 'degraded' ? 'warn' : 'bad';

          facts.replaceChildren(
            ...([
              ['Version', st.version],
              ['Uptime', fmtDuration(st.uptime_s)],
              ['Points', String(st.points)],
              ['Stream clients', String(st.clients)],
              ['Subscriptions', String(st.subscriptions)],
              ['Loop lag', m.has('opsd_loop_lag_seconds') ? `${((m.get('opsd_loop_lag_seconds') ?? 0) * 1000).toFixed(1)} ms` : '—'],
              ['Config reloads', st.reloads ? `${st.reloads.ok} ok, ${st.reloads.failed} failed` : '—'],
              ['Config file', st.config ?? '—'],
            ] as [string, string][]).flatMap(([k, v]) => [h('dt', {}, k), h('dd', { 'data-key': k }, v)]),
          );

          const rateVals: number[] = [];
          rateTable.replaceChildren();
          for (const [label, name, title] of rates) {
            const cur = sumMetric(m, name);
            if (cur === undefined) continue;
            let rate: number | undefined;
            if (prev) {
              const before = sumMetric(prev.m, name);
              if (before !== undefined) rate = Math.max(0, (cur - before) / ((t - prev.t) / 1000));
            }
            rateVals.push(rate ?? NaN);
            rateTable.append(row(label, name.endsWith('bytes_sent_total') ? (rate === undefined ? '—' : `${fmtBytes(rate)}/s`) : fmtRate(rate), title));
          }

          queueTable.replaceChildren();
          for (const [k, v] of m) {
            if (/(_pending_|_queue|_queued|_buffer_samples|_backlog|_inflight)/.test(k) && !k.endsWith('_total'))
              queueTable.append(row(k.replace(/^opsd_/, ''), String(v)));
          }
          if (st.history) queueTable.append(row('history queued', String(st.history.queued ?? '—')));
          if (!queueTable.children.length) queueTable.append(row('none reported', ''));

          storeTable.replaceChildren();
          for (const [k, v] of m) {
            if (/_bytes$|_bytes\{/.test(k) && !k.endsWith('_total') && !/sent|received/.test(k))
              storeTable.append(row(k.replace(/^opsd_/, ''), fmtBytes(v)));
          }
          for (const [k, v] of m) {
            if (/_(partitions|series|devices|models|messages)(\{|$)/.test(k) && !k.endsWith('_total'))
              storeTable.append(row(k.replace(/^opsd_/, ''), String(v)));
          }
          if (!storeTable.children.length) storeTable.append(row('no store configured', ''));

          // Active alarms by priority: the server counts (limit=1 answers the total).
          const al = st.alarms as Record<string, number> | undefined;
          if (al) {
            const totals = await Promise.all([1, 2, 3].map((p) =>
              getJSON<{ total: number }>(`/api/v1/alarms?state=active&priority=${p}&limit=1`).then((x) => x.total).catch(() => NaN)));
            const other = (al.active ?? 0) - totals.reduce((a, b) => a + (Number.isNaN(b) ? 0 : b), 0);
            alarmCard.hidden = false;
            alarmTable.replaceChildren(
              ...totals.map((n, i) => h('tr', { 'data-p': String(i + 1) }, h('th', { scope: 'row' }, `Priority ${i + 1}`), h('td', { class: 'num' }, Number.isNaN(n) ? '—' : String(n)))),
              row('Other priorities', String(Math.max(0, other))),
              row('Unacknowledged', String(al.unacked ?? '—')),
              row('Shelved', String(al.shelved ?? '—')),
              row('Deployment state', String(al.deployment ?? '—')),
            );
          }

          // The plant: active and unacknowledged alarms by area (one summary query).
          if (al) {
            const sum = await getJSON<{ alarms: { area: string; priority: number; active: boolean; acked: boolean }[] }>(
              '/api/v1/alarms?state=active,unack&limit=5000').catch(() => null);
            if (sum) {
              const by = new Map<string, { active: number; unacked: number; top: number }>();
              for (const a of sum.alarms) {
                const k = a.area || '(no area)';
                const e = by.get(k) ?? { active: 0, unacked: 0, top: Infinity };
                if (a.active) e.active++;
                if (!a.acked) e.unacked++;
                e.top = Math.min(e.top, a.priority);
                by.set(k, e);
              }
              const list = [...by].sort((x, y) => x[1].top - y[1].top || y[1].unacked - x[1].unacked || (x[0] < y[0] ? -1 : 1));
              areaCard.hidden = false;
              areaTable.replaceChildren(...(list.length ? list.slice(0, AREAS_MAX).map(([area, e]) =>
                h('tr', { 'data-area': area, 'data-p': String(Math.min(e.top, 4)) },
                  h('td', {}, h('a', { href: `#/alarms?area=${encodeURIComponent(area)}` }, area)),
                  h('td', { class: 'num' }, String(e.active)), h('td', { class: 'num' }, String(e.unacked)),
                  h('td', { class: 'num prio' }, `P${e.top}`))) : [h('tr', {}, h('td', { colspan: 4, class: 'muted' }, 'No alarm needs attention.'))]));
            }
          }

          driverTable.replaceChildren(
            ...(st.drivers ?? []).map((d) =>
              h('tr', {}, h('td', {}, d.name), h('td', {}, d.type), h('td', { class: 'num' }, String(d.points)), h('td', { class: 'num' }, d.samples === undefined ? '—' : String(d.samples))),
            ),
          );

          if (prev) {
            const ingest = sumMetric(m, 'opsd_point_updates_total');
            const fan = sumMetric(m, 'opsd_stream_values_sent_total');
            const dt = (t - prev.t) / 1000;
            const pi = sumMetric(prev.m, 'opsd_point_updates_total');
            const pf = sumMetric(prev.m, 'opsd_stream_values_sent_total');
            hist[0].push(Date.now());
            hist[1].push(ingest !== undefined && pi !== undefined ? Math.max(0, (ingest - pi) / dt) : NaN);
            hist[2].push(fan !== undefined && pf !== undefined ? Math.max(0, (fan - pf) / dt) : NaN);
            let cut = 0;
            while (cut < hist[0].length && hist[0][cut] < Date.now() - WINDOW_MS) cut++;
            if (cut) for (const a of hist) a.splice(0, cut);
            plot?.setData(hist as uPlot.AlignedData);
            chartBox.dataset.rows = String(hist[0].length);
          }
          prev = { t, m };
        } catch (e) {
          err.textContent = `Cannot read the server's status: ${(e as Error).message}`;
          health.textContent = 'unreachable';
          health.dataset.state = 'bad';
        }
        if (!stopped) timer = window.setTimeout(poll, POLL_MS);
      };
      void poll();
    },
    unmount() {
      stopped = true;
      clearTimeout(timer);
      ro?.disconnect();
      if (onTheme) window.removeEventListener('opsd-theme', onTheme);
      plot?.destroy();
      plot = null;
    },
  };
}

// Overview: health, uptime, ingest and fan-out rates, queue depths and store sizes, from
// /healthz, /api/v1/status and /metrics every 2 s. Rates are counter deltas between two
// scrapes; a small chart keeps the last 10 minutes of them. Queue and store figures are taken
// from every metric whose name says so, so modules that add theirs show up without a change.
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { getJSON, getText, parseMetrics, type Metrics, type Status } from '../api';
import { fmtBytes, fmtDuration, fmtRate, h, type Page } from '../util';

const POLL_MS = 2000;
const KEEP = 300; /* points in the rate chart: 10 minutes */

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
  const hist: number[][] = [[], [], []];

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
      const err = h('p', { class: 'msg', role: 'alert' });
      root.append(
        h('div', { class: 'title' }, h('h1', {}, 'Overview'), health),
        err,
        h('div', { class: 'grid' },
          h('section', { class: 'card' }, h('h2', {}, 'Server'), facts),
          alarmCard,
          h('section', { class: 'card' }, h('h2', {}, 'Rates'),
            h('table', { class: 'kv' }, rateTable)),
          h('section', { class: 'card wide' }, h('h2', {}, 'Ingest and fan-out, last 10 minutes'), chartBox),
          h('section', { class: 'card' }, h('h2', {}, 'Queue depths'), h('table', { class: 'kv' }, queueTable)),
          h('section', { class: 'card' }, h('h2', {}, 'Stores'), h('table', { class: 'kv' }, storeTable)),
          h('section', { class: 'card' }, h('h2', {}, 'Drivers'),
            h('table', { class: 'list' }, h('thead', {}, h('tr', {}, h('th', {}, 'Name'), h('th', {}, 'Type'), h('th', { class: 'num' }, 'Points'), h('th', { class: 'num' }, 'Samples'))), driverTable)),
        ),
      );

      const makePlot = () => {
        const w = Math.max(200, chartBox.clientWidth);
        plot = new uPlot({
          width: w,
          height: 180,
          series: [
            {},
            { label: 'ingest', stroke: '#1f77b4', value: (_u, v) => fmtRate(v ?? undefined) },
            { label: 'fan-out', stroke: '#d62728', value: (_u, v) => fmtRate(v ?? undefined) },
          ],
          axes: [{}, { size: 70, values: (_u, vals) => vals.map((v) => fmtRate(v)) }],
          scales: { x: { time: true, range: () => [Date.now() / 1000 - (KEEP * POLL_MS) / 1000, Date.now() / 1000] } },
          cursor: { drag: { x: false, y: false } },
        }, hist as uPlot.AlignedData, chartBox);
      };
      makePlot();
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
            hist[0].push(Date.now() / 1000);
            hist[1].push(ingest !== undefined && pi !== undefined ? Math.max(0, (ingest - pi) / dt) : NaN);
            hist[2].push(fan !== undefined && pf !== undefined ? Math.max(0, (fan - pf) / dt) : NaN);
            for (const a of hist) if (a.length > KEEP) a.splice(0, a.length - KEEP);
            plot?.setData(hist as uPlot.AlignedData);
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
      plot?.destroy();
      plot = null;
    },
  };
}

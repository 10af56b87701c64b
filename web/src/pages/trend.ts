// Trend: pens (points), time range presets, zoom (drag a range, mouse wheel, + and -) and
// pan (buttons, arrow keys), history down-sampled by the server to the chart's pixel width
// (GET /api/v1/history?...&buckets=WIDTH), live tracking that appends stream updates to the
// same pixel-wide buckets without querying the window again, axes per unit, one shared axis
// or a normalised view, and CSV export of what is shown.
//
// Data model: one row per bucket of width `w` ms starting at `origin + k*w`; x is the
// bucket's middle. A history bucket arrives with its average and count; a live value folds
// into its bucket's running average (appending a row when it opens a new bucket), so the
// number of rows stays about the chart's width however long the page stays live. Old rows
// slide out of the window. Drawing is batched: at most one redraw per animation frame and
// per 200 ms, whatever the update rate of 20 pens.
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { ApiError, getJSON, stream, type Point, type PointPage, type StreamValue } from '../api';
import { axisTheme, debounce, download, fmtTime, fmtValue, h, timeAxisValues, type Page } from '../util';

const SUB_ID = 'trend';
const LAST_KEY = 'opsd.trend.last';  /* the pens and range last shown, for the next visit */
const SETS_KEY = 'opsd.trend.sets';  /* named pen sets: {name: "points=..&span=.."} */
const MAX_PENS = 32;
const DRAW_MS = 200;
const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#17becf',
  '#7f7f7f', '#bcbd22', '#393b79', '#ad494a', '#637939', '#8c6d31', '#843c39', '#7b4173', '#3182bd',
  '#e6550d', '#31a354', '#756bb1'];
const PRESETS: [string, number][] = [['5m', 300e3], ['15m', 900e3], ['1h', 3600e3], ['8h', 8 * 3600e3], ['24h', 86400e3], ['7d', 7 * 86400e3]];

type AxisMode = 'unit' | 'shared' | 'normalised';

interface Pen {
  name: string;
  type: Point['type'];
  unit: string;
  color: string;
  dash?: number[];
  cur: HTMLElement;
  at: HTMLElement;
}

interface HistSeries {
  point: string;
  buckets: [number, { avg?: number | null; count?: number }][];
}

function numeric(v: unknown): number | null {
  if (typeof v === 'number') return Number.isFinite(v) ? v : null;
  if (typeof v === 'boolean') return v ? 1 : 0;
  return null;
}

function fmtSpan(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 10) return `${+s.toFixed(1)} s`;
  if (s < 120) return `${Math.round(s)} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  if (s < 172800) return `${+(s / 3600).toFixed(1)} h`;
  return `${+(s / 86400).toFixed(1)} d`;
}

export function trendPage(): Page {
  let pens: Pen[] = [];
  let span = 3600e3;
  let end = Date.now();        /* the window's end when not live */
  let live = true;
  let axisMode: AxisMode = 'unit';
  // rows
  let origin = 0;
  let w = 1000;
  let xs: number[] = [];
  let starts: number[] = [];
  let raw: (number | null)[][] = [];
  let cnt: number[][] = [];
  let histTo = 0;
  let loading = 0;
  let pending: StreamValue[] | null = null;
  let liveAppends = 0;
  // drawing
  let plot: uPlot | null = null;
  let lastDraw = 0;
  let raf = 0;
  let tick = 0;
  let ro: ResizeObserver | null = null;
  let lastWidth = 0;
  let unmounted = false;
  // elements
  let chartBox: HTMLDivElement;
  let status: HTMLElement;
  let penList: HTMLElement;
  let liveBox: HTMLInputElement;
  let rangeLabel: HTMLElement;
  let err: HTMLElement;
  let cursorLabel: HTMLElement;

  const penIndex = new Map<string, number>();

  const view = (): [number, number] => {
    const to = live ? Date.now() : end;
    return [to - span, to];
  };

  const saveUrl = () => {
    const q = new URLSearchParams();
    if (pens.length) q.set('points', pens.map((p) => p.name).join(','));
    q.set('span', String(Math.round(span)));
    if (!live) q.set('to', String(Math.round(end)));
    if (axisMode !== 'unit') q.set('axes', axisMode);
    history.replaceState(null, '', `#/trend?${q}`);
    if (pens.length) {
      const last = new URLSearchParams(q);
      last.delete('to');
      localStorage.setItem(LAST_KEY, last.toString());
    }
  };

  const plotWidth = () => Math.max(200, chartBox.clientWidth);
  const plotHeight = () => Math.max(260, Math.min(560, window.innerHeight - 330));

  // ---- data ----

  const displayed = (): uPlot.AlignedData => {
    if (axisMode !== 'normalised') return [xs, ...raw] as uPlot.AlignedData;
    const [a, b] = view();
    return [xs, ...raw.map((col) => {
      let lo = Infinity;
      let hi = -Infinity;
      for (let i = 0; i < col.length; i++) {
        const v = col[i];
        if (v === null || xs[i] < a || xs[i] > b) continue;
        if (v < lo) lo = v;
        if (v > hi) hi = v;
      }
      const d = hi > lo ? hi - lo : 1;
      const base = hi > lo ? lo : lo - 0.5;
      return col.map((v) => (v === null ? null : ((v - base) / d) * 100));
    })] as uPlot.AlignedData;
  };

  const markDirty = () => {
    if (!raf) raf = requestAnimationFrame(draw);
  };

  function draw() {
    raf = 0;
    if (!plot || unmounted) return;
    const now = performance.now();
    if (now - lastDraw < DRAW_MS) {
      raf = requestAnimationFrame(draw);
      return;
    }
    lastDraw = now;
    const [a, b] = view();
    plot.batch(() => {
      plot!.setData(displayed(), false);
      plot!.setScale('x', { min: a, max: b });
    });
    chartBox.dataset.rows = String(xs.length);
    chartBox.dataset.liveAppends = String(liveAppends);
    let shown = 0;
    for (const c of raw) for (const v of c) if (v !== null) shown++;
    chartBox.dataset.points = String(shown);
  }

  /** Folds a live value into its bucket (a new row when it opens one). */
  const addLive = (pi: number, ts: number, v: number) => {
    if (ts <= histTo) return; /* history has it */
    const k = Math.floor((ts - origin) / w);
    const start = origin + k * w;
    let i = starts.length - 1;
    if (i < 0 || starts[i] < start) {
      starts.push(start);
      xs.push(start + w / 2);
      for (let p = 0; p < raw.length; p++) {
        raw[p].push(null);
        cnt[p].push(0);
      }
      i = starts.length - 1;
    } else if (starts[i] !== start) {
      /* out of order: find or insert its row */
      let lo = 0;
      let hi = starts.length;
      while (lo < hi) {
        const m = (lo + hi) >> 1;
        if (starts[m] < start) lo = m + 1;
        else hi = m;
      }
      i = lo;
      if (starts[i] !== start) {
        starts.splice(i, 0, start);
        xs.splice(i, 0, start + w / 2);
        for (let p = 0; p < raw.length; p++) {
          raw[p].splice(i, 0, null);
          cnt[p].splice(i, 0, 0);
        }
      }
    }
    const n = cnt[pi][i];
    const old = raw[pi][i];
    raw[pi][i] = old === null || n === 0 ? v : (old * n + v) / (n + 1);
    cnt[pi][i] = n + 1;
    liveAppends++;
  };

  /** Drops rows that slid out of the live window (keeping one bucket before it). */
  const trim = () => {
    const [a] = view();
    let cut = 0;
    while (cut < starts.length && starts[cut] + w < a - w) cut++;
    if (!cut) return;
    starts.splice(0, cut);
    xs.splice(0, cut);
    for (let p = 0; p < raw.length; p++) {
      raw[p].splice(0, cut);
      cnt[p].splice(0, cut);
    }
  };

  const onValues = (values: StreamValue[]) => {
    for (const [name, value, ts, quality] of values) {
      const pi = penIndex.get(name);
      if (pi === undefined) continue;
      const pen = pens[pi];
      pen.cur.textContent = `${fmtValue(value, pen.unit, name)}${quality !== 'good' ? ` (${quality})` : ''}`;
      pen.cur.dataset.q = quality;
      if (!live) continue;
      const v = numeric(value);
      if (v === null || quality === 'bad') continue;
      if (pending) {
        pending.push([name, value, ts, quality]);
        continue;
      }
      addLive(pi, ts, v);
      markDirty();
    }
  };

  const loadHistory = async () => {
    const my = ++loading;
    /* one bucket per pixel of the plotting area (the axes take the rest) */
    const n = Math.max(50, Math.min(4000, Math.round(plot?.over.clientWidth || plotWidth() - 130)));
    lastWidth = plotWidth();
    const to = Math.round(view()[1]);
    w = Math.max(1, Math.ceil(span / n));
    const from = to - w * n;
    origin = from;
    pending = [];
    err.textContent = '';
    if (!pens.length) {
      xs = [];
      starts = [];
      raw = [];
      cnt = [];
      histTo = to;
      pending = null;
      status.textContent = 'Add a point to trend.';
      markDirty();
      return;
    }
    status.textContent = 'Loading history…';
    const t0 = performance.now();
    try {
      const q = new URLSearchParams({
        points: pens.map((p) => p.name).join(','),
        from: String(from),
        to: String(to),
        buckets: String(n),
        agg: 'avg,count',
      });
      const res = await getJSON<{ series: HistSeries[] }>(`/api/v1/history?${q}`);
      if (my !== loading || unmounted) return;
      const rowOf = new Map<number, number>();
      const all = new Set<number>();
      for (const s of res.series) for (const [st] of s.buckets) all.add(st);
      starts = [...all].sort((a, b) => a - b);
      starts.forEach((st, i) => rowOf.set(st, i));
      xs = starts.map((st) => st + w / 2);
      raw = pens.map(() => new Array<number | null>(starts.length).fill(null));
      cnt = pens.map(() => new Array<number>(starts.length).fill(0));
      let samples = 0;
      for (const s of res.series) {
        const pi = penIndex.get(s.point);
        if (pi === undefined) continue;
        for (const [st, agg] of s.buckets) {
          const i = rowOf.get(st)!;
          raw[pi][i] = agg.avg ?? null;
          cnt[pi][i] = agg.count ?? 1;
          samples += agg.count ?? 0;
        }
      }
      histTo = to;
      const waiting = pending ?? [];
      pending = null;
      for (const [name, value, ts, quality] of waiting) {
        const pi = penIndex.get(name);
        const v = numeric(value);
        if (pi !== undefined && v !== null && quality !== 'bad') addLive(pi, ts, v);
      }
      chartBox.dataset.historyRows = String(starts.length);
      status.textContent = `${samples.toLocaleString()} samples in ${starts.length} buckets of ${fmtSpan(w)} (${Math.round(performance.now() - t0)} ms)${live ? ', live' : ''}`;
      markDirty();
    } catch (e) {
      if (my !== loading) return;
      pending = null;
      err.textContent = e instanceof ApiError && e.status === 404 && e.code === 'not_found'
        ? 'History is not configured on this server (no history: section): live values only.'
        : `Cannot load history: ${(e as Error).message}`;
      xs = [];
      starts = [];
      raw = pens.map(() => []);
      cnt = pens.map(() => []);
      histTo = to;
      status.textContent = live ? 'live' : '';
      markDirty();
    }
  };
  const reloadSoon = debounce(() => void loadHistory(), 250);

  // ---- the chart ----

  const buildPlot = () => {
    plot?.destroy();
    plot = null;
    chartBox.replaceChildren();
    const scaleOf = (p: Pen) => (axisMode === 'unit' ? `u:${p.unit || '-'}` : axisMode === 'shared' ? 'y' : 'n');
    const scales: uPlot.Scales = { x: { time: true } };
    const th = axisTheme();
    /* the time labels drawn are kept in data-x-ticks too (the canvas has no text to read) */
    const xValues = (u: uPlot, splits: number[], ax: number, space: number, incr: number) => {
      const v = timeAxisValues(u, splits, ax, space, incr);
      chartBox.dataset.xTicks = v.join('|');
      return v;
    };
    const axes: uPlot.Axis[] = [{ ...th, values: xValues, space: 90, size: 46 }];
    const seen: string[] = [];
    for (const p of pens) {
      const k = scaleOf(p);
      if (seen.includes(k)) continue;
      seen.push(k);
      scales[k] = axisMode === 'normalised' ? { auto: false, range: [0, 100] } : { auto: true };
      axes.push({
        scale: k,
        side: seen.length % 2 ? 3 : 1,
        ...th,
        grid: { ...th.grid, show: seen.length === 1 },
        size: 60,
        label: axisMode === 'normalised' ? '% of range' : axisMode === 'shared' ? '' : p.unit || '(no unit)',
        labelSize: 18,
      });
    }
    const series: uPlot.Series[] = [{}];
    pens.forEach((p) =>
      series.push({
        label: p.name,
        scale: scaleOf(p),
        stroke: p.color,
        dash: p.dash,
        width: 1.5,
        spanGaps: true,
        points: { show: false },
      }),
    );
    plot = new uPlot({
      width: plotWidth(),
      height: plotHeight(),
      ms: 1,
      scales,
      axes,
      series,
      legend: { show: false },
      cursor: { drag: { x: true, y: false, setScale: false } },
      hooks: {
        setCursor: [(u) => showCursor(u.cursor.idx)],
        setSelect: [
          (u) => {
            if (u.select.width > 4) {
              const a = u.posToVal(u.select.left, 'x');
              const b = u.posToVal(u.select.left + u.select.width, 'x');
              setWindow(b - a, b, false);
            }
            u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
          },
        ],
      },
    }, displayed(), chartBox);
    plot.over.addEventListener('wheel', (ev) => {
      ev.preventDefault();
      const rect = plot!.over.getBoundingClientRect();
      const at = plot!.posToVal(ev.clientX - rect.left, 'x');
      zoom(ev.deltaY < 0 ? 0.8 : 1.25, at);
    }, { passive: false });
    lastDraw = 0;
    markDirty();
  };

  const setWindow = (newSpan: number, newEnd: number, goLive: boolean, reload = true) => {
    span = Math.round(Math.max(10e3, Math.min(400 * 86400e3, newSpan)));
    const now = Date.now();
    live = goLive || (newEnd >= now - 1000 && live);
    end = Math.round(Math.min(newEnd, now));
    if (goLive) end = now;
    liveBox.checked = live;
    rangeLabel.textContent = live ? `last ${fmtSpan(span)}` : `${fmtTime(end - span)} – ${fmtTime(end)}`;
    saveUrl();
    markDirty(); /* immediate feedback with the rows there are */
    if (reload) reloadSoon();
  };

  const zoom = (factor: number, at?: number) => {
    const [a, b] = view();
    const c = at ?? (a + b) / 2;
    const na = c - (c - a) * factor;
    const nb = c + (b - c) * factor;
    setWindow(nb - na, nb, live && nb >= Date.now());
  };

  const pan = (frac: number) => {
    const [, b] = view();
    const nb = b + span * frac;
    if (nb >= Date.now()) setWindow(span, Date.now(), true);
    else setWindow(span, nb, false);
  };

  // ---- pens ----

  const subscribe = () => {
    if (!pens.length) {
      stream.unsubscribe(SUB_ID);
      return;
    }
    stream.subscribe(SUB_ID, { points: pens.map((p) => p.name), interval: 250 }, onValues, (_c, m) => {
      err.textContent = `Live values: ${m}`;
    });
  };

  const renderPens = () => {
    penIndex.clear();
    pens.forEach((p, i) => penIndex.set(p.name, i));
    penList.replaceChildren(
      ...pens.map((p) =>
        h('li', { 'data-name': p.name },
          h('span', { class: 'swatch', style: `background:${p.color}`, 'aria-hidden': 'true' }),
          h('span', { class: 'pen-name' }, p.name),
          p.at,
          p.cur,
          h('button', { type: 'button', class: 'link', 'aria-label': `Remove ${p.name}`, onclick: () => removePen(p.name) }, '✕'),
        ),
      ),
    );
  };

  const pensChanged = () => {
    renderPens();
    saveUrl();
    buildPlot();
    subscribe();
    void loadHistory();
  };

  /** The values at the cursor beside each pen (the current value stays on the right). */
  const showCursor = (idx: number | null | undefined) => {
    const at = idx === null || idx === undefined ? null : idx;
    cursorLabel.textContent = at === null || xs[at] === undefined ? '' : fmtTime(xs[at]);
    pens.forEach((p, pi) => {
      p.at.textContent = at === null ? '' : fmtValue(raw[pi]?.[at] ?? null, p.unit, p.name);
    });
  };

  const addPens = async (names: string[]) => {
    const add: Pen[] = [];
    const problems: string[] = [];
    for (const name of names) {
      if (!name || pens.some((p) => p.name === name) || add.some((p) => p.name === name)) continue;
      if (pens.length + add.length >= MAX_PENS) {
        problems.push(`at most ${MAX_PENS} pens`);
        break;
      }
      try {
        const pt = await getJSON<Point>(`/api/v1/points/${encodeURIComponent(name)}`);
        if (pt.type === 'string') {
          problems.push(`${name} holds strings: it cannot be drawn`);
          continue;
        }
        const n = pens.length + add.length;
        add.push({
          name,
          type: pt.type,
          unit: pt.unit ?? '',
          color: PALETTE[n % PALETTE.length],
          dash: n >= PALETTE.length ? [6, 3] : undefined,
          cur: h('span', { class: 'pen-value num', title: 'current value' }, fmtValue(pt.value, pt.unit, name)),
          at: h('span', { class: 'pen-at num', title: 'value at the cursor' }),
        });
      } catch (e) {
        problems.push((e as Error).message);
      }
    }
    err.textContent = problems.join('; ');
    if (unmounted || !add.length) return;
    /* keep one column of rows per pen: the chart is rebuilt before history comes */
    for (let i = 0; i < add.length; i++) {
      raw.push(new Array<number | null>(xs.length).fill(null));
      cnt.push(new Array<number>(xs.length).fill(0));
    }
    pens = pens.concat(add);
    pensChanged();
  };

  const removePen = (name: string) => {
    const gone = pens.findIndex((p) => p.name === name);
    if (gone < 0) return;
    raw.splice(gone, 1);
    cnt.splice(gone, 1);
    pens = pens.filter((p) => p.name !== name);
    pens.forEach((p, i) => {
      p.color = PALETTE[i % PALETTE.length];
      p.dash = i >= PALETTE.length ? [6, 3] : undefined;
    });
    pensChanged();
  };

  // ---- CSV ----

  const exportCsv = () => {
    const [a, b] = view();
    const esc = (s: string) => (/[",\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s);
    const lines = [['time', ...pens.map((p) => (p.unit ? `${p.name} (${p.unit})` : p.name))].map(esc).join(',')];
    for (let i = 0; i < xs.length; i++) {
      if (xs[i] < a || xs[i] > b) continue;
      lines.push([new Date(xs[i]).toISOString(), ...raw.map((c) => (c[i] === null ? '' : String(c[i])))].join(','));
    }
    download(`trend-${new Date(a).toISOString().replace(/[:.]/g, '')}.csv`, lines.join('\n') + '\n');
  };

  return {
    title: 'Trend',
    mount(root, params) {
      /* no pens asked for: the ones last used on this device */
      if (!params.get('points') && localStorage.getItem(LAST_KEY)) params = new URLSearchParams(localStorage.getItem(LAST_KEY)!);
      const q = Number(params.get('span'));
      if (q > 0) span = q;
      const t = Number(params.get('to'));
      if (t > 0) {
        end = t;
        live = false;
      }
      const am = params.get('axes');
      if (am === 'shared' || am === 'normalised') axisMode = am;

      const pick = h('input', { id: 'tr-pick', list: 'tr-options', placeholder: 'point name (prefix lists matches)', autocomplete: 'off', 'aria-label': 'Point to add' });
      const options = h('datalist', { id: 'tr-options' });
      const addForm = h('form', { class: 'toolbar inline', id: 'tr-add' }, pick, options, h('button', { type: 'submit' }, 'Add'));
      addForm.addEventListener('submit', (ev) => {
        ev.preventDefault();
        const names = pick.value.split(/[\s,]+/).filter(Boolean);
        pick.value = '';
        void addPens(names);
      });
      pick.addEventListener('input', debounce(async () => {
        const p = pick.value.trim();
        if (!p) return;
        try {
          const page = await getJSON<PointPage>(`/api/v1/points?prefix=${encodeURIComponent(p)}&limit=20`);
          options.replaceChildren(...page.points.filter((x) => x.type !== 'string').map((x) => h('option', { value: x.name })));
        } catch {
          /* suggestions only */
        }
      }, 200));

      liveBox = h('input', { type: 'checkbox', id: 'tr-live', checked: live });
      liveBox.addEventListener('change', () => setWindow(span, Date.now(), liveBox.checked));
      rangeLabel = h('span', { class: 'muted', id: 'tr-range' });
      const axisSel = h('select', { id: 'tr-axes', 'aria-label': 'Y axes' },
        h('option', { value: 'unit' }, 'One axis per unit'),
        h('option', { value: 'shared' }, 'One shared axis'),
        h('option', { value: 'normalised' }, 'Normalised (0-100 % of each range)'));
      axisSel.value = axisMode;
      axisSel.addEventListener('change', () => {
        axisMode = axisSel.value as AxisMode;
        saveUrl();
        buildPlot();
      });

      const presetBar = h('div', { class: 'toolbar', role: 'group', 'aria-label': 'Time range' },
        ...PRESETS.map(([label, ms]) => h('button', { type: 'button', 'data-span': ms, onclick: () => setWindow(ms, Date.now(), true) }, label)),
        h('button', { type: 'button', title: 'Pan back (←)', 'aria-label': 'Pan back', onclick: () => pan(-0.5) }, '◀'),
        h('button', { type: 'button', title: 'Pan forward (→)', 'aria-label': 'Pan forward', onclick: () => pan(0.5) }, '▶'),
        h('button', { type: 'button', title: 'Zoom in (+)', 'aria-label': 'Zoom in', onclick: () => zoom(0.5) }, '+'),
        h('button', { type: 'button', title: 'Zoom out (-)', 'aria-label': 'Zoom out', onclick: () => zoom(2) }, '−'),
        h('label', { class: 'check' }, liveBox, ' Live'),
        axisSel,
        h('button', { type: 'button', id: 'tr-csv', onclick: exportCsv }, 'Export CSV'),
        rangeLabel,
      );

      chartBox = h('div', { class: 'chart', id: 'tr-chart', tabindex: 0, 'aria-label': 'Trend chart: arrow keys pan, + and - zoom, L goes live; drag to zoom into a range' });
      chartBox.addEventListener('keydown', (ev) => {
        if (ev.key === 'ArrowLeft') pan(-0.25);
        else if (ev.key === 'ArrowRight') pan(0.25);
        else if (ev.key === '+' || ev.key === '=') zoom(0.5);
        else if (ev.key === '-') zoom(2);
        else if (ev.key === 'l' || ev.key === 'L') setWindow(span, Date.now(), true);
        else return;
        ev.preventDefault();
      });
      status = h('p', { class: 'muted', id: 'tr-status', 'aria-live': 'polite' });
      err = h('p', { class: 'msg', role: 'alert' });
      penList = h('ul', { class: 'pens', id: 'tr-pens', 'aria-label': 'Pens' });
      cursorLabel = h('p', { class: 'muted cursor-at', id: 'tr-cursor', 'aria-live': 'off' });

      // Named pen sets, kept on this device.
      const sets = (): Record<string, string> => {
        try {
          return JSON.parse(localStorage.getItem(SETS_KEY) ?? '{}') as Record<string, string>;
        } catch {
          return {};
        }
      };
      const setSel = h('select', { id: 'tr-sets', 'aria-label': 'Open a saved pen set' });
      const fillSets = () => {
        const all = sets();
        setSel.replaceChildren(h('option', { value: '' }, Object.keys(all).length ? 'Pen sets…' : 'No saved pen sets'),
          ...Object.keys(all).sort().map((n) => h('option', { value: n }, n)));
      };
      fillSets();
      setSel.addEventListener('change', () => {
        const q = sets()[setSel.value];
        if (q) location.hash = `#/trend?${q}&set=${encodeURIComponent(setSel.value)}`;
      });
      const setName = h('input', { id: 'tr-set-name', placeholder: 'name of this pen set', size: 18, 'aria-label': 'Name of the pen set', value: params.get('set') ?? '' });
      const setMsg = h('span', { class: 'wmsg', role: 'status' });
      const saveSet = h('form', { class: 'toolbar inline' }, setName, h('button', { type: 'submit', id: 'tr-set-save' }, 'Save pens'), setSel, setMsg);
      saveSet.addEventListener('submit', (ev) => {
        ev.preventDefault();
        const n = setName.value.trim();
        if (!n || !pens.length) {
          setMsg.textContent = !pens.length ? 'add pens first' : 'give it a name';
          setMsg.dataset.state = 'bad';
          return;
        }
        const q = new URLSearchParams({ points: pens.map((p) => p.name).join(','), span: String(Math.round(span)) });
        if (axisMode !== 'unit') q.set('axes', axisMode);
        localStorage.setItem(SETS_KEY, JSON.stringify({ ...sets(), [n]: q.toString() }));
        fillSets();
        setMsg.textContent = `saved as "${n}"`;
        setMsg.dataset.state = 'good';
      });

      root.append(
        h('div', { class: 'title' }, h('h1', {}, 'Trend')),
        h('div', { class: 'toolbar' }, addForm, saveSet),
        presetBar,
        err,
        h('div', { class: 'trend' }, chartBox, h('aside', {}, h('h2', {}, 'Pens'), cursorLabel, penList)),
        status,
      );

      setWindow(span, live ? Date.now() : end, live, false); /* the first query comes below */
      buildPlot();
      ro = new ResizeObserver(() => {
        if (!plot) return;
        plot.setSize({ width: plotWidth(), height: plotHeight() });
        /* a much wider or narrower plot: ask again at its new pixel width */
        if (lastWidth && Math.abs(plotWidth() - lastWidth) > lastWidth * 0.2) reloadSoon();
      });
      ro.observe(chartBox);
      window.addEventListener('opsd-theme', buildPlot);
      tick = window.setInterval(() => {
        if (!live) return;
        trim();
        markDirty();
      }, 1000);
      const initial = (params.get('points') ?? '').split(',').filter(Boolean);
      if (initial.length) void addPens(initial);
      else void loadHistory();
      pick.focus();
    },
    unmount() {
      unmounted = true;
      clearInterval(tick);
      cancelAnimationFrame(raf);
      ro?.disconnect();
      window.removeEventListener('opsd-theme', buildPlot);
      stream.unsubscribe(SUB_ID);
      plot?.destroy();
      plot = null;
    },
  };
}

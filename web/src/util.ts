// Small DOM and formatting helpers shared by the pages.

type Attrs = Record<string, string | number | boolean | undefined | ((ev: Event) => void)>;

/** h('div', {class: 'x', onclick: f}, child, 'text') */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Attrs = {},
  ...children: (Node | string | null | undefined | false)[]
): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === false) continue;
    if (typeof v === 'function') e.addEventListener(k.replace(/^on/, ''), v as EventListener);
    else if (v === true) e.setAttribute(k, '');
    else e.setAttribute(k, String(v));
  }
  for (const c of children) if (c !== null && c !== undefined && c !== false) e.append(c);
  return e;
}

// Decimals per point: a point shows every value with the same number of decimals, the most
// its values have had (up to 3; a value at 0.01 resolution makes it 2), so "0.00 %" and
// "4.32 %" line up instead of "0 %" beside "4.32 %". Integers and counters keep none.
const decimals = new Map<string, number>();

function decimalsOf(v: number): number {
  if (Number.isInteger(v)) return 0;
  const a = Math.abs(v);
  for (let d = 1; d < 3; d++) if (Math.abs(Math.round(a * 10 ** d) - a * 10 ** d) < 1e-6 * Math.max(1, a * 10 ** d)) return d;
  return 3;
}

/** Records a value of a point, so its later values are shown with as many decimals. */
export function noteDecimals(name: string, v: unknown): number {
  const had = decimals.get(name) ?? 0;
  if (typeof v !== 'number' || !Number.isFinite(v)) return had;
  const d = Math.max(had, Math.abs(v) >= 1000 ? Math.min(decimalsOf(v), 1) : decimalsOf(v));
  if (d !== had) decimals.set(name, d);
  return d;
}

/** A value with its unit; `name` (a point's) fixes the decimals for that point. */
export function fmtValue(v: unknown, unit?: string, name?: string): string {
  if (v === null || v === undefined) return '—';
  let s: string;
  if (typeof v === 'number') {
    if (name !== undefined) s = v.toFixed(noteDecimals(name, v));
    else s = Number.isInteger(v) ? String(v) : v.toFixed(Math.abs(v) >= 100 ? 1 : 3).replace(/\.?0+$/, '');
  } else s = String(v);
  return unit ? `${s} ${unit}` : s;
}

export function fmtAge(ms: number): string {
  if (!(ms >= 0)) return '—';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.floor(s % 60)} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

export function fmtDuration(sec: number): string {
  return fmtAge(sec * 1000).replace(/\.\d s$/, ' s');
}

export function fmtBytes(n: number | undefined): string {
  if (n === undefined || !Number.isFinite(n)) return '—';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i ? n.toFixed(1) : n} ${u[i]}`;
}

export function fmtRate(n: number | undefined): string {
  if (n === undefined || !Number.isFinite(n)) return '—';
  if (n >= 1e6) return `${(n / 1e6).toFixed(2)} M/s`;
  if (n >= 1e4) return `${(n / 1e3).toFixed(1)} k/s`;
  return `${n.toFixed(n >= 100 ? 0 : 1)} /s`;
}

const p2 = (x: number, n = 2) => String(x).padStart(n, '0');

/** Local time, ISO order, 24 hours: 2026-12-04 13:41:05. */
export function fmtTime(ms: number): string {
  const d = new Date(ms);
  return `${d.getFullYear()}-${p2(d.getMonth() + 1)}-${p2(d.getDate())} ${p2(d.getHours())}:${p2(d.getMinutes())}:${p2(d.getSeconds())}`;
}

/** Time-axis labels in ISO order and 24 hours for uPlot (x values in ms): the clock, with
 *  seconds when the ticks are less than a minute apart, and the date where the day changes
 *  (and on the first tick). */
export function timeAxisValues(_u: unknown, splits: number[], _ax: number, _space: number, incr: number): string[] {
  let lastDay = '';
  return splits.map((v) => {
    if (v === null || v === undefined) return '';
    const d = new Date(v);
    const day = `${d.getFullYear()}-${p2(d.getMonth() + 1)}-${p2(d.getDate())}`;
    const clock = incr >= 86400e3 ? '' : incr < 60e3 ? `${p2(d.getHours())}:${p2(d.getMinutes())}:${p2(d.getSeconds())}` : `${p2(d.getHours())}:${p2(d.getMinutes())}`;
    const showDay = day !== lastDay && (incr >= 3600e3 || lastDay === '');
    lastDay = day;
    if (!clock) return day;
    return showDay && incr >= 3600e3 ? `${clock}\n${day}` : clock;
  });
}

/** The colours of the current theme, for what is drawn on a canvas. */
export function themeColors(): { fg: string; muted: string; grid: string; card: string } {
  const cs = getComputedStyle(document.documentElement);
  const v = (n: string, d: string) => cs.getPropertyValue(n).trim() || d;
  return { fg: v('--fg', '#1b2430'), muted: v('--muted', '#5b6673'), grid: v('--grid', '#e3e7eb'), card: v('--card', '#fff') };
}

/** uPlot axis options in the theme's colours. */
export function axisTheme(): { stroke: string; grid: { stroke: string; width: number }; ticks: { stroke: string; width: number } } {
  const c = themeColors();
  return { stroke: c.muted, grid: { stroke: c.grid, width: 1 }, ticks: { stroke: c.grid, width: 1 } };
}

export function debounce<A extends unknown[]>(f: (...a: A) => void, ms: number): (...a: A) => void {
  let t = 0;
  return (...a: A) => {
    clearTimeout(t);
    t = window.setTimeout(() => f(...a), ms);
  };
}

export function download(name: string, text: string, type = 'text/csv'): void {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = h('a', { href: url, download: name });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

export interface Page {
  title: string;
  mount(root: HTMLElement, params: URLSearchParams): void;
  unmount(): void;
}

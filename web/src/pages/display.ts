// Process displays: SVG drawings from the server's displays folder (GET /api/v1/displays),
// whose elements bind to points through data- attributes (docs/displays.md): text with the
// value, colours by value ranges, fill level, rotation, show/hide, blink, quality, alarm state
// and links to other displays. One stream subscription for exactly the bound points (and one
// for the alarms named by data-alarm); changes are applied at most once per animation frame.
// A click on a bound element opens its faceplate: value, quality, source time, the last hour,
// its alarms with acknowledge, and a write box when the point is writable. Wheel zooms, drag
// pans, double-click fits the drawing again.
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { ApiError, getJSON, getText, sendJSON, stream, type Point, type PointPage, type StreamValue } from '../api';
import { axisTheme, fmtAge, fmtTime, fmtValue, h, timeAxisValues, type Page } from '../util';

const SUB_ID = 'display';
const ALARM_SUB_ID = 'display-alarms';
const START_KEY = 'opsd.start';
/* The drawing lives in a shadow root: its own <style> stays inside it, and these rules (how
   bindings look) apply to it alone. */
const SHADOW_CSS = `
:host { display: block; }
svg { display: block; width: 100%; height: calc(100vh - 190px); min-height: 320px; cursor: grab; user-select: none; color: var(--fg); }
@media (max-width: 900px) { svg { height: 60vh; } }
.bound, [data-alarm], .link { cursor: pointer; }
[data-q="bad"], [data-q="none"] { opacity: 0.45; }
[data-q="uncertain"] { opacity: 0.75; }
.blink, [data-alarm-state="active_unack"], [data-alarm-state="rtn_unack"] { animation: blink 1s steps(2, start) infinite; }
[data-alarm-p="1"][data-alarm-state^="active"] { filter: drop-shadow(0 0 5px #e53935) drop-shadow(0 0 2px #e53935); }
[data-alarm-p="2"][data-alarm-state^="active"] { filter: drop-shadow(0 0 5px #ef6c00) drop-shadow(0 0 2px #ef6c00); }
[data-alarm-p="3"][data-alarm-state^="active"], [data-alarm-p="4"][data-alarm-state^="active"] { filter: drop-shadow(0 0 5px #f9a825); }
[data-alarm-state="rtn_unack"] { filter: drop-shadow(0 0 4px #8895a3); }
@keyframes blink { 50% { opacity: 0.35; } }
@media (prefers-reduced-motion: reduce) { .blink, [data-alarm-state] { animation: none; } }
`;

interface DisplayInfo { name: string; file: string; title: string; bytes: number; modified: number }
interface AlarmRow { id: string; alarm: string; state: string; active: boolean; acked: boolean; priority: number; message: string; removed?: boolean }
export interface BindingProblem { element: string; reason: string }

type Cond = (v: number | boolean | string | null) => boolean;

/** "> 90", ">= 2", "== true", "true", "!= 0": a condition on a value; null when unreadable. */
export function parseCond(s: string): Cond | null {
  const m = /^\s*(>=|<=|==|!=|>|<)?\s*(true|false|-?\d+(?:\.\d+)?)\s*$/.exec(s);
  if (!m) return null;
  const op = m[1] ?? '==';
  const lit = m[2] === 'true' ? 1 : m[2] === 'false' ? 0 : Number(m[2]);
  return (v) => {
    const x = typeof v === 'boolean' ? (v ? 1 : 0) : typeof v === 'number' ? v : NaN;
    if (Number.isNaN(x)) return false;
    switch (op) {
      case '>': return x > lit;
      case '>=': return x >= lit;
      case '<': return x < lit;
      case '<=': return x <= lit;
      case '!=': return x !== lit;
      default: return x === lit;
    }
  };
}

/** "0 #2ca02c; 80 #ff7f0e; 90 #d62728" (from each limit up) or "false #888; true #2ca02c". */
export function parseColors(s: string): [number, string][] | null {
  const out: [number, string][] = [];
  for (const part of s.split(';').map((x) => x.trim()).filter(Boolean)) {
    const m = /^(true|false|-?\d+(?:\.\d+)?)\s+(#[0-9a-fA-F]{3,8}|[a-zA-Z]+|(?:rgb|hsl)a?\([^)]*\))$/.exec(part);
    if (!m) return null;
    out.push([m[1] === 'true' ? 1 : m[1] === 'false' ? 0 : Number(m[1]), m[2]]);
  }
  out.sort((a, b) => a[0] - b[0]);
  return out.length ? out : null;
}

/** "0 100": a range of two numbers, low first. */
export function parseRange(s: string): [number, number] | null {
  const m = /^\s*(-?\d+(?:\.\d+)?)\s+(-?\d+(?:\.\d+)?)\s*$/.exec(s);
  if (!m || !(Number(m[2]) > Number(m[1]))) return null;
  return [Number(m[1]), Number(m[2])];
}

const num = (v: unknown): number | null => (typeof v === 'number' ? v : typeof v === 'boolean' ? (v ? 1 : 0) : null);

interface Bound {
  el: SVGGraphicsElement;
  point: string;
  text?: { decimals?: number; labels?: [string, string]; unit?: string };
  colors?: [number, string][];
  colorAttr: string;
  fill?: { range: [number, number]; y: number; height: number };
  rotate?: { range: [number, number]; cx: number; cy: number };
  visible?: Cond;
  blink?: Cond;
}

function describe(el: Element): string {
  const id = el.getAttribute('id');
  return id ? `#${id}` : `<${el.tagName}> ${el.getAttribute('data-point') ?? ''}`.trim();
}

export function displayPage(): Page {
  let unmounted = false;
  let raf = 0;
  const pending = new Map<string, StreamValue>();
  const byPoint = new Map<string, Bound[]>();
  const last = new Map<string, StreamValue>();
  const alarms = new Map<string, AlarmRow>(); /* by id */
  const alarmEls: Element[] = [];
  let points = new Map<string, Point>();
  let face: (() => void) | null = null; /* refreshes the open faceplate */
  let facePlot: uPlot | null = null;
  let ageTimer = 0;

  const apply = () => {
    raf = 0;
    for (const [name, sv] of pending) {
      for (const b of byPoint.get(name) ?? []) paint(b, sv);
    }
    pending.clear();
    face?.();
  };

  const paint = (b: Bound, [, value, , quality]: StreamValue) => {
    const el = b.el;
    el.dataset.q = quality === 'bad' && value === null ? 'none' : quality;
    const v = num(value);
    if (b.text) {
      let s: string;
      if (typeof value === 'boolean' && b.text.labels) s = b.text.labels[value ? 1 : 0];
      else if (value === null || value === undefined) s = '—';
      else if (typeof value === 'number' && b.text.decimals !== undefined) s = value.toFixed(b.text.decimals);
      else s = fmtValue(value, undefined, b.point);
      const unit = b.text.unit ?? points.get(b.point)?.unit;
      if (unit && typeof value === 'number') s += ` ${unit}`;
      if (quality !== 'good' && value !== null) s += quality === 'bad' ? ' ?' : ' ~';
      if (el.textContent !== s) el.textContent = s;
    }
    if (b.colors && v !== null) {
      let c = b.colors[0][1];
      for (const [lim, col] of b.colors) if (v >= lim) c = col;
      el.style.setProperty(b.colorAttr, c);
    }
    if (b.fill && v !== null) {
      const [lo, hi] = b.fill.range;
      const f = Math.max(0, Math.min(1, (v - lo) / (hi - lo)));
      el.setAttribute('height', String(b.fill.height * f));
      el.setAttribute('y', String(b.fill.y + b.fill.height * (1 - f)));
    }
    if (b.rotate && v !== null) {
      const [lo, hi] = b.rotate.range;
      const deg = Math.max(0, Math.min(1, (v - lo) / (hi - lo))) * 360;
      el.setAttribute('transform', `rotate(${deg.toFixed(1)} ${b.rotate.cx} ${b.rotate.cy})`);
    }
    if (b.visible) el.style.visibility = b.visible(value) ? '' : 'hidden';
    if (b.blink) el.classList.toggle('blink', b.blink(value));
  };

  const paintAlarms = () => {
    for (const el of alarmEls) {
      const names = (el.getAttribute('data-alarm') ?? '').split(',').map((x) => x.trim()).filter(Boolean);
      let worst: AlarmRow | null = null;
      for (const a of alarms.values()) {
        if (!names.includes(a.alarm) && !names.includes(a.id)) continue;
        if (!worst || a.priority < worst.priority || (a.priority === worst.priority && a.active && !worst.active)) worst = a;
      }
      if (worst) {
        el.setAttribute('data-alarm-state', worst.state);
        el.setAttribute('data-alarm-p', String(Math.min(worst.priority, 4)));
      } else {
        el.removeAttribute('data-alarm-state');
        el.removeAttribute('data-alarm-p');
      }
    }
    face?.();
  };

  return {
    title: 'Display',
    mount(root, params) {
      const name = params.get('name') ?? '';
      const err = h('p', { class: 'msg', role: 'alert' });
      const list = h('ul', { class: 'display-list', id: 'dp-list' });
      const problemsBox = h('details', { class: 'card problems', id: 'dp-problems', hidden: true });
      const stage = h('div', { class: 'display-stage', id: 'dp-stage' });
      const side = h('aside', { class: 'faceplate card', id: 'dp-face', hidden: true, 'aria-live': 'polite' });
      const startBtn = h('button', { type: 'button', id: 'dp-start', class: 'link' }, 'Make this my start page');
      const titleEl = h('h1', {}, name ? name : 'Displays');
      root.append(h('div', { class: 'title' }, titleEl, h('span', { class: 'spacer' }), name ? startBtn : null), err, list, problemsBox,
        h('div', { class: 'display-wrap' }, stage, side));
      root.classList.add('wide');

      startBtn.addEventListener('click', () => {
        localStorage.setItem(START_KEY, `display?name=${encodeURIComponent(name)}`);
        startBtn.textContent = 'Start page: this display';
      });
      if (localStorage.getItem(START_KEY) === `display?name=${encodeURIComponent(name)}`) startBtn.textContent = 'Start page: this display';


      const mountSvg = (text: string, file: string) => {
        const doc = new DOMParser().parseFromString(text, 'image/svg+xml');
        const svg = doc.documentElement;
        if (svg.tagName !== 'svg' || doc.querySelector('parsererror')) {
          err.textContent = `${file}: not a valid SVG drawing (${doc.querySelector('parsererror')?.textContent?.slice(0, 200) ?? svg.tagName})`;
          return;
        }
        /* the drawing is data: no scripts, no event handlers, no javascript: links */
        for (const s of svg.querySelectorAll('script, foreignObject')) s.remove();
        for (const el of svg.querySelectorAll('*')) {
          for (const a of [...el.attributes]) {
            if (/^on/i.test(a.name) || (/href$/i.test(a.name) && /^\s*javascript:/i.test(a.value))) el.removeAttribute(a.name);
          }
        }
        const node = document.importNode(svg, true) as unknown as SVGSVGElement;
        node.setAttribute('id', 'dp-svg');
        node.removeAttribute('width');
        node.removeAttribute('height');
        if (!node.getAttribute('viewBox')) {
          const w = parseFloat(svg.getAttribute('width') ?? '') || 1000;
          const ht = parseFloat(svg.getAttribute('height') ?? '') || 700;
          node.setAttribute('viewBox', `0 0 ${w} ${ht}`);
        }
        node.setAttribute('preserveAspectRatio', 'xMidYMid meet');
        const shadow = stage.shadowRoot ?? stage.attachShadow({ mode: 'open' });
        shadow.replaceChildren(h('style', {}, SHADOW_CSS), node);
        bind(node, file);
        panZoom(node);
      };

      const bind = (svg: SVGSVGElement, file: string) => {
        const problems: BindingProblem[] = [];
        const bad = (el: Element, reason: string) => problems.push({ element: describe(el), reason });
        for (const el of svg.querySelectorAll<SVGGraphicsElement>('[data-point]')) {
          const point = el.getAttribute('data-point')!.trim();
          const p = points.get(point);
          if (!p) {
            bad(el, points.size ? `no point named "${point}"` : `point "${point}" cannot be checked`);
            if (points.size) continue;
          }
          const b: Bound = { el, point, colorAttr: el.getAttribute('data-color-attr') === 'stroke' ? 'stroke' : 'fill' };
          const numeric = !p || p.type !== 'string';
          const t = el.getAttribute('data-text');
          if (t !== null) {
            b.text = {};
            if (el.hasAttribute('data-unit')) b.text.unit = el.getAttribute('data-unit')!;
            if (/^0(\.0+)?$/.test(t)) b.text.decimals = t.includes('.') ? t.split('.')[1].length : 0;
            else if (/^[^|]*\|[^|]*$/.test(t)) b.text.labels = t.split('|') as [string, string];
            else if (t !== '') bad(el, `data-text "${t}": give "", a format like "0.00", or "OFF|ON" for a bool`);
          }
          const c = el.getAttribute('data-colors');
          if (c !== null) {
            const parsed = parseColors(c);
            if (!parsed) bad(el, `data-colors "${c}": give "LIMIT COLOUR; LIMIT COLOUR" (e.g. "0 #2ca02c; 90 #d62728")`);
            else if (!numeric) bad(el, `data-colors: "${point}" holds strings`);
            else b.colors = parsed;
          }
          const f = el.getAttribute('data-fill');
          if (f !== null) {
            const r = parseRange(f);
            if (!r) bad(el, `data-fill "${f}": give the value range "LOW HIGH" (e.g. "0 100")`);
            else if (el.tagName !== 'rect') bad(el, 'data-fill needs a <rect> (its height is the full level)');
            else if (!numeric) bad(el, `data-fill: "${point}" holds strings`);
            else b.fill = { range: r, y: parseFloat(el.getAttribute('y') ?? '0'), height: parseFloat(el.getAttribute('height') ?? '0') };
          }
          const ro = el.getAttribute('data-rotate');
          if (ro !== null) {
            const r = parseRange(ro);
            if (!r) bad(el, `data-rotate "${ro}": give the value range for one turn "LOW HIGH"`);
            else {
              const bb = el.getBBox();
              b.rotate = { range: r, cx: bb.x + bb.width / 2, cy: bb.y + bb.height / 2 };
            }
          }
          for (const [attr, key] of [['data-visible', 'visible'], ['data-blink', 'blink']] as const) {
            const v = el.getAttribute(attr);
            if (v === null) continue;
            const cond = parseCond(v);
            if (!cond) bad(el, `${attr} "${v}": give a condition like "> 90", "== 1" or "true"`);
            else b[key] = cond;
          }
          el.classList.add('bound');
          const arr = byPoint.get(point) ?? [];
          arr.push(b);
          byPoint.set(point, arr);
          if (p) paint(b, [p.name, p.value, p.ts ?? 0, p.quality]);
        }
        for (const el of svg.querySelectorAll('[data-link]')) {
          const to = el.getAttribute('data-link')!;
          el.classList.add('link');
          el.addEventListener('click', (ev) => {
            ev.stopPropagation();
            location.hash = `#/display?name=${encodeURIComponent(to)}`;
          });
        }
        for (const el of svg.querySelectorAll('[data-alarm]')) alarmEls.push(el);
        svg.addEventListener('click', (ev) => {
          const el = (ev.target as Element).closest('[data-point], [data-alarm]');
          if (el && !moved) openFace(el);
        });
        stage.dataset.bound = String(svg.querySelectorAll('[data-point]').length);
        stage.dataset.points = String(byPoint.size);
        if (problems.length) {
          problemsBox.hidden = false;
          problemsBox.replaceChildren(h('summary', {}, `${problems.length} binding problem${problems.length > 1 ? 's' : ''} in ${file}`),
            h('ul', {}, ...problems.map((p) => h('li', {}, `${file}: ${p.element}: ${p.reason}`))));
        }
        if (byPoint.size) {
          stream.subscribe(SUB_ID, { points: [...byPoint.keys()], interval: 250 }, (values) => {
            for (const sv of values) {
              pending.set(sv[0], sv);
              last.set(sv[0], sv);
            }
            if (!raf) raf = requestAnimationFrame(apply);
          }, (_c, m) => { err.textContent = `Live values: ${m}`; });
        }
        if (alarmEls.length) {
          stream.subscribeOp(ALARM_SUB_ID, { op: 'subscribe_alarms', filter: { state: 'all' } }, (m) => {
            if (m.op === 'alarms' && Array.isArray(m.alarms)) {
              alarms.clear();
              for (const a of m.alarms as AlarmRow[]) alarms.set(a.id, a);
            } else if (m.op === 'alarm_changes' && Array.isArray(m.changes)) {
              for (const a of m.changes as AlarmRow[]) {
                if (a.removed) alarms.delete(a.id);
                else alarms.set(a.id, a);
              }
            } else return;
            paintAlarms();
          });
        }
      };

      // ---- pan and zoom (the viewBox) ----
      let moved = false;
      const panZoom = (svg: SVGSVGElement) => {
        const vb0 = svg.viewBox.baseVal;
        const home = [vb0.x, vb0.y, vb0.width, vb0.height];
        let vb = [...home];
        const set = () => svg.setAttribute('viewBox', vb.map((x) => x.toFixed(2)).join(' '));
        const toSvg = (cx: number, cy: number) => {
          const r = svg.getBoundingClientRect();
          const s = Math.max(vb[2] / r.width, vb[3] / r.height);
          const ox = (r.width * s - vb[2]) / 2;
          const oy = (r.height * s - vb[3]) / 2;
          return [vb[0] - ox + (cx - r.left) * s, vb[1] - oy + (cy - r.top) * s, s];
        };
        svg.addEventListener('wheel', (ev) => {
          ev.preventDefault();
          const [x, y] = toSvg(ev.clientX, ev.clientY);
          const k = ev.deltaY < 0 ? 0.8 : 1.25;
          const w = Math.max(home[2] / 20, Math.min(home[2] * 4, vb[2] * k));
          const f = w / vb[2];
          vb = [x - (x - vb[0]) * f, y - (y - vb[1]) * f, vb[2] * f, vb[3] * f];
          set();
        }, { passive: false });
        let drag: [number, number, number[]] | null = null;
        svg.addEventListener('pointerdown', (ev) => {
          drag = [ev.clientX, ev.clientY, [...vb]];
          moved = false;
        });
        svg.addEventListener('pointermove', (ev) => {
          if (!drag) return;
          const dx = ev.clientX - drag[0];
          const dy = ev.clientY - drag[1];
          if (!moved && Math.hypot(dx, dy) < 4) return;
          moved = true;
          const s = toSvg(0, 0)[2];
          vb = [drag[2][0] - dx * s, drag[2][1] - dy * s, vb[2], vb[3]];
          set();
        });
        svg.addEventListener('pointerup', () => { drag = null; });
        svg.addEventListener('dblclick', () => {
          vb = [...home];
          set();
        });
      };

      // ---- the faceplate ----
      const openFace = (el: Element) => {
        const point = el.getAttribute('data-point')?.trim() ?? '';
        const alarmNames = (el.getAttribute('data-alarm') ?? '').split(',').map((x) => x.trim()).filter(Boolean);
        const p = points.get(point);
        side.hidden = false;
        side.dataset.point = point;
        const val = h('dd', { class: 'num', id: 'fp-value' });
        const q = h('dd', { id: 'fp-quality' });
        const ts = h('dd', { id: 'fp-ts' });
        const age = h('dd', { id: 'fp-age' });
        const alarmList = h('ul', { class: 'fp-alarms', id: 'fp-alarms' });
        const chart = h('div', { class: 'chart small', id: 'fp-chart' });
        const msg = h('p', { class: 'wmsg', role: 'status', id: 'fp-msg' });
        let write: HTMLElement | null = null;
        if (p?.writable) {
          const input = h('input', { id: 'fp-write', size: 10, 'aria-label': `New value for ${point}`, placeholder: p.type });
          write = h('form', { class: 'write', id: 'fp-write-form' }, input, h('button', { type: 'submit' }, 'Write'));
          write.addEventListener('submit', async (ev) => {
            ev.preventDefault();
            const t = input.value.trim();
            const v = p.type === 'bool' ? /^(true|1|on)$/i.test(t) : p.type === 'string' ? t : Number(t);
            if (p.type !== 'string' && p.type !== 'bool' && (t === '' || !Number.isFinite(v as number))) {
              msg.textContent = 'needs a number';
              msg.dataset.state = 'bad';
              return;
            }
            try {
              await sendJSON('PUT', `/api/v1/points/${encodeURIComponent(point)}`, { value: v });
              msg.textContent = 'written';
              msg.dataset.state = 'good';
            } catch (e) {
              msg.dataset.state = 'bad';
              msg.textContent = e instanceof ApiError && e.status === 403 ? 'writing needs the operator role' : (e as Error).message;
            }
          });
        }
        side.replaceChildren(...[
          h('div', { class: 'title' }, h('h2', {}, point || alarmNames.join(', ')), h('span', { class: 'spacer' }),
            h('button', { type: 'button', class: 'link', 'aria-label': 'Close', id: 'fp-close', onclick: closeFace }, '✕')),
          p?.description ? h('p', { class: 'muted' }, p.description) : null,
          point ? h('dl', { class: 'facts' }, h('dt', {}, 'Value'), val, h('dt', {}, 'Quality'), q, h('dt', {}, 'Source time'), ts, h('dt', {}, 'Age'), age) : null,
          point ? h('p', {}, h('a', { href: `#/trend?points=${encodeURIComponent(point)}&span=3600000` }, 'Open in Trend')) : null,
          point ? chart : null,
          alarmNames.length ? h('h3', {}, 'Alarms') : null, alarmNames.length ? alarmList : null,
          write, msg,
        ].filter((x): x is HTMLElement => x !== null));
        face = () => {
          const sv = last.get(point) ?? (p ? [p.name, p.value, p.ts ?? 0, p.quality] as StreamValue : null);
          if (sv) {
            val.textContent = fmtValue(sv[1], p?.unit, point);
            q.textContent = sv[3];
            q.dataset.q = sv[3];
            ts.textContent = sv[2] ? fmtTime(sv[2]) : '—';
            age.textContent = sv[2] ? fmtAge(Date.now() - sv[2]) : '—';
          }
          const rows = [...alarms.values()].filter((a) => alarmNames.includes(a.alarm) || alarmNames.includes(a.id))
            .sort((a, b) => a.priority - b.priority || (a.id < b.id ? -1 : 1));
          alarmList.replaceChildren(...(rows.length ? rows.map((a) => h('li', { 'data-id': a.id, 'data-state': a.state, 'data-p': String(Math.min(a.priority, 4)) },
            h('span', {}, `P${a.priority} ${a.id}: ${a.state.replace(/_/g, ' ')}`),
            !a.acked && a.state !== 'normal' ? h('button', { type: 'button', class: 'primary', onclick: () => void ack(a.id) }, 'Acknowledge') : null))
            : [h('li', { class: 'muted' }, 'none')]));
        };
        const ack = async (id: string) => {
          try {
            await sendJSON('POST', '/api/v1/alarms/ack', { alarms: [id], comment: 'from the display' });
            msg.textContent = `acknowledged ${id}`;
            msg.dataset.state = 'good';
          } catch (e) {
            msg.dataset.state = 'bad';
            msg.textContent = e instanceof ApiError && e.status === 403 ? 'acknowledging needs the operator role' : (e as Error).message;
          }
        };
        face();
        facePlot?.destroy();
        facePlot = null;
        if (point && p && p.type !== 'string') {
          void getJSON<{ series: { buckets: [number, { avg?: number | null }][] }[] }>(
            `/api/v1/history?points=${encodeURIComponent(point)}&from=-1h&buckets=240&agg=avg`).then((r) => {
            if (side.dataset.point !== point) return;
            const b = r.series[0]?.buckets ?? [];
            const th = axisTheme();
            facePlot?.destroy();
            facePlot = new uPlot({
              width: Math.max(220, chart.clientWidth), height: 140, ms: 1, legend: { show: false },
              scales: { x: { time: true, range: () => [Date.now() - 3600e3, Date.now()] } },
              axes: [{ ...th, values: timeAxisValues, space: 70 }, { ...th, size: 44 }],
              series: [{}, { stroke: '#1f77b4', width: 1.5, spanGaps: true, points: { show: false } }],
            }, [b.map((x) => x[0]), b.map((x) => x[1].avg ?? null)] as uPlot.AlignedData, chart);
            chart.dataset.rows = String(b.length);
          }, () => { chart.textContent = 'no history for this point'; });
        }
      };
      const closeFace = () => {
        side.hidden = true;
        face = null;
        facePlot?.destroy();
        facePlot = null;
      };
      ageTimer = window.setInterval(() => face?.(), 1000);
      const start = async () => {
        let displays: DisplayInfo[] = [];
        try {
          displays = (await getJSON<{ displays: DisplayInfo[] }>('/api/v1/displays')).displays;
        } catch (e) {
          err.textContent = e instanceof ApiError && e.status === 404
            ? 'This server has no process displays (server.displays_dir, see docs/displays.md).'
            : `Cannot list the displays: ${(e as Error).message}`;
          return;
        }
        list.replaceChildren(...displays.map((d) => h('li', { 'data-name': d.name, 'aria-current': d.name === name ? 'page' : undefined },
          h('a', { href: `#/display?name=${encodeURIComponent(d.name)}` }, d.title || d.name))));
        if (!name) {
          if (!displays.length) err.textContent = 'The displays folder holds no SVG file yet.';
          return;
        }
        const info = displays.find((d) => d.name === name);
        if (info?.title) titleEl.textContent = info.title;
        let text: string;
        try {
          text = await getText(`/api/v1/displays/${encodeURIComponent(name)}.svg`);
        } catch (e) {
          err.textContent = `Cannot load the display "${name}": ${(e as Error).message}`;
          return;
        }
        if (unmounted) return;
        try {
          const pg = await getJSON<PointPage>('/api/v1/points?limit=10000');
          points = new Map(pg.points.map((p) => [p.name, p]));
        } catch {
          /* bindings are checked against what is known */
        }
        mountSvg(text, `${info?.file ?? name + '.svg'}`);
      };
      void start();
    },
    unmount() {
      unmounted = true;
      cancelAnimationFrame(raf);
      clearInterval(ageTimer);
      stream.unsubscribe(SUB_ID);
      stream.unsubscribe(ALARM_SUB_ID);
      facePlot?.destroy();
      document.getElementById('main')?.classList.remove('wide');
    },
  };
}

/** The start page chosen on this device ("display?name=plant"), or null. */
export function startPage(): string | null {
  return localStorage.getItem(START_KEY);
}

// Points: search by name prefix (the server filters: GET /api/v1/points?prefix=), a page of
// 100 points with live values from the stream (a subscription to just the shown names), their
// quality and age, and a write form for writable points (PUT /api/v1/points/NAME, role
// operator). A name links to the trend of that point.
import { ApiError, getJSON, sendJSON, stream, type Point, type PointPage, type StreamValue } from '../api';
import { debounce, fmtAge, fmtValue, h, type Page } from '../util';

const PAGE = 100;
const SUB_ID = 'points-page';

interface Row {
  p: Point;
  tr: HTMLTableRowElement;
  value: HTMLTableCellElement;
  quality: HTMLTableCellElement;
  age: HTMLTableCellElement;
}

function parseInput(type: Point['type'], text: string): { value?: unknown; error?: string } {
  const t = text.trim();
  switch (type) {
    case 'double': {
      const v = Number(t);
      return t !== '' && Number.isFinite(v) ? { value: v } : { error: 'a number' };
    }
    case 'int': {
      const v = Number(t);
      return t !== '' && Number.isInteger(v) ? { value: v } : { error: 'a whole number' };
    }
    case 'bool':
      if (/^(true|1|on)$/i.test(t)) return { value: true };
      if (/^(false|0|off)$/i.test(t)) return { value: false };
      return { error: 'true or false' };
    default:
      return { value: text };
  }
}

export function pointsPage(): Page {
  let rows = new Map<string, Row>();
  let ageTimer = 0;
  let gen = 0;

  return {
    title: 'Points',
    mount(root, params) {
      const search = h('input', { id: 'pt-search', type: 'search', placeholder: 'name or prefix, e.g. tank1-00', value: params.get('prefix') ?? '', 'aria-label': 'Search points by name or prefix', autocomplete: 'off' });
      const summary = h('p', { class: 'muted', id: 'pt-summary', 'aria-live': 'polite' });
      const tbody = h('tbody', { id: 'pt-rows' });
      const more = h('button', { type: 'button', hidden: true }, 'Show more');
      const err = h('p', { class: 'msg', role: 'alert' });
      root.append(
        h('div', { class: 'title' }, h('h1', {}, 'Points')),
        h('form', { class: 'toolbar', role: 'search', onsubmit: (e: Event) => { e.preventDefault(); void load(false); } },
          search, h('button', { type: 'submit' }, 'Search')),
        summary,
        err,
        h('div', { class: 'scroll' },
          h('table', { class: 'list points' },
            h('thead', {}, h('tr', {},
              h('th', {}, 'Name'), h('th', { class: 'num' }, 'Value'), h('th', {}, 'Quality'), h('th', { class: 'num' }, 'Age'),
              h('th', {}, 'Type'), h('th', {}, 'Description'), h('th', {}, 'Write'))),
            tbody)),
        more,
      );

      let next: string | null = null;

      const subscribe = () => {
        const names = [...rows.keys()];
        if (!names.length) {
          stream.unsubscribe(SUB_ID);
          return;
        }
        stream.subscribe(SUB_ID, { points: names, interval: 500 }, (values: StreamValue[]) => {
          for (const [name, value, ts, quality, reason] of values) {
            const r = rows.get(name);
            if (!r) continue;
            const changed = r.p.value !== value;
            r.p.value = value;
            r.p.ts = ts;
            r.p.quality = quality;
            r.p.reason = reason;
            paint(r, changed);
          }
        });
      };

      const paint = (r: Row, flash = false) => {
        r.value.textContent = fmtValue(r.p.value, r.p.unit);
        r.quality.textContent = r.p.quality + (r.p.reason ? ` (${r.p.reason})` : '');
        r.quality.dataset.q = r.p.quality;
        r.age.textContent = r.p.ts ? fmtAge(Date.now() - r.p.ts) : '—';
        if (flash) {
          r.value.classList.remove('flash');
          void r.value.offsetWidth;
          r.value.classList.add('flash');
        }
      };

      const writeCell = (p: Point): HTMLTableCellElement => {
        if (!p.writable) return h('td', { class: 'muted' }, '—');
        const id = `w-${p.name}`;
        const input = p.type === 'bool'
          ? h('select', { id, 'aria-label': `New value for ${p.name}` }, h('option', { value: 'true' }, 'true'), h('option', { value: 'false' }, 'false'))
          : h('input', { id, type: p.type === 'string' ? 'text' : 'number', step: 'any', size: 8, 'aria-label': `New value for ${p.name}` });
        const msg = h('span', { class: 'wmsg', role: 'status' });
        const form = h('form', { class: 'write' }, input, h('button', { type: 'submit' }, 'Write'), msg);
        form.addEventListener('submit', async (ev) => {
          ev.preventDefault();
          const parsed = parseInput(p.type, input.value);
          if (parsed.error) {
            msg.textContent = `needs ${parsed.error}`;
            msg.dataset.state = 'bad';
            return;
          }
          msg.textContent = '…';
          try {
            const got = await sendJSON<Point>('PUT', `/api/v1/points/${encodeURIComponent(p.name)}`, { value: parsed.value });
            msg.textContent = 'written';
            msg.dataset.state = 'good';
            const r = rows.get(p.name);
            if (r) {
              Object.assign(r.p, got);
              paint(r, true);
            }
          } catch (e) {
            msg.dataset.state = 'bad';
            msg.textContent = e instanceof ApiError && e.status === 403 ? 'your token may not write (operator role needed)' : (e as Error).message;
          }
        });
        return h('td', {}, form);
      };

      const addRows = (pts: Point[]) => {
        for (const p of pts) {
          const value = h('td', { class: 'num value' });
          const quality = h('td', { class: 'q' });
          const age = h('td', { class: 'num age' });
          const tr = h('tr', { 'data-name': p.name },
            h('td', {}, h('a', { href: `#/trend?points=${encodeURIComponent(p.name)}`, title: 'Trend of this point' }, p.name)),
            value, quality, age,
            h('td', {}, p.type), h('td', { class: 'desc' }, p.description ?? ''),
            writeCell(p));
          const r = { p, tr, value, quality, age };
          rows.set(p.name, r);
          paint(r);
          tbody.append(tr);
        }
      };

      const load = async (append: boolean) => {
        const my = ++gen;
        const prefix = search.value.trim();
        const q = new URLSearchParams({ limit: String(PAGE) });
        if (prefix) q.set('prefix', prefix);
        if (append && next) q.set('cursor', next);
        if (!append) history.replaceState(null, '', `#/points${prefix ? '?prefix=' + encodeURIComponent(prefix) : ''}`);
        try {
          const page = await getJSON<PointPage>(`/api/v1/points?${q}`);
          if (my !== gen) return;
          err.textContent = '';
          if (!append) {
            rows = new Map();
            tbody.replaceChildren();
          }
          addRows(page.points);
          next = page.next;
          more.hidden = !next;
          summary.textContent = page.total === 0 ? `No point starts with "${prefix}".` : `${rows.size} of ${page.total} points${prefix ? ` starting with "${prefix}"` : ''}`;
          subscribe();
        } catch (e) {
          if (my === gen) err.textContent = `Cannot list points: ${(e as Error).message}`;
        }
      };

      search.addEventListener('input', debounce(() => void load(false), 250));
      more.addEventListener('click', () => void load(true));
      ageTimer = window.setInterval(() => {
        const now = Date.now();
        for (const r of rows.values()) r.age.textContent = r.p.ts ? fmtAge(now - r.p.ts) : '—';
      }, 1000);
      void load(false);
      search.focus();
    },
    unmount() {
      gen++;
      clearInterval(ageTimer);
      stream.unsubscribe(SUB_ID);
      rows.clear();
    },
  };
}

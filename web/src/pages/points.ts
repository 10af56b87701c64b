// Points: search by name prefix (the server filters: GET /api/v1/points?prefix=), a page of
// 100 points with live values from the stream (a subscription to just the shown names), their
// quality and age, and a write form for writable points (PUT /api/v1/points/NAME, role
// operator). A name links to the trend of that point. Beside the list, a tree of the names
// (like a tag browser): the segments of the names ("tank1-", "pump-01.") and, where a level
// has too many names, their leading characters; a node is a prefix, so opening it lists its
// points. A point that never had a value says so in grey (it is not a fault).
import { ApiError, getJSON, sendJSON, stream, type Point, type PointPage, type StreamValue } from '../api';
import { debounce, fmtAge, fmtValue, h, type Page } from '../util';

const PAGE = 100;
const FANOUT = 40; /* at most this many children per tree node */

/** The children of a tree node: the prefixes one level down (with their counts) and the
 *  names that end there. `names` is sorted and all start with `prefix`. */
export function treeLevel(prefix: string, names: string[]): { groups: [string, number][]; leaves: string[] } {
  const bySegment = new Map<string, number>();
  const leaves: string[] = [];
  for (const n of names) {
    const rest = n.slice(prefix.length);
    const m = /^[^-._/:]+[-._/:]/.exec(rest);
    if (!m || m[0].length === rest.length) leaves.push(n);
    else bySegment.set(prefix + m[0], (bySegment.get(prefix + m[0]) ?? 0) + 1);
  }
  if (bySegment.size + leaves.length <= FANOUT) return { groups: [...bySegment], leaves };
  // Too many at one level (tank1-0000..1999): group by the leading characters, as many as
  // keep the level within FANOUT.
  let best: Map<string, number> | null = null;
  for (let k = 1; k <= 8; k++) {
    const g = new Map<string, number>();
    for (const n of names) {
      const key = n.slice(0, prefix.length + k);
      g.set(key, (g.get(key) ?? 0) + 1);
    }
    if (g.size > FANOUT) break;
    best = g;
    if (g.size === names.length) break;
  }
  if (!best || best.size <= 1) return { groups: [...bySegment], leaves };
  const groups: [string, number][] = [];
  const single: string[] = [];
  for (const [k, c] of best) {
    if (c === 1 && names.includes(k)) single.push(k);
    else groups.push([k, c]);
  }
  return { groups, leaves: single };
}
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
      const tree = h('ul', { class: 'tree', id: 'pt-tree', role: 'tree', 'aria-label': 'Points by name' });
      root.append(
        h('div', { class: 'title' }, h('h1', {}, 'Points')),
        h('form', { class: 'toolbar', role: 'search', onsubmit: (e: Event) => { e.preventDefault(); void load(false); } },
          search, h('button', { type: 'submit' }, 'Search')),
        h('div', { class: 'browse' },
          h('details', { class: 'card tree-box', open: window.innerWidth > 700 }, h('summary', {}, 'Browse by name'), tree),
          h('div', { class: 'browse-main' },
            summary,
            err,
            h('div', { class: 'scroll' },
              h('table', { class: 'list points cards' },
                h('thead', {}, h('tr', {},
                  h('th', {}, 'Name'), h('th', { class: 'num' }, 'Value'), h('th', {}, 'Quality'), h('th', { class: 'num' }, 'Age'),
                  h('th', {}, 'Type'), h('th', {}, 'Description'), h('th', {}, 'Write'))),
                tbody)),
            more)),
      );

      // ---- the name tree ----
      let allNames: string[] = [];
      const pick = (prefix: string) => {
        search.value = prefix;
        void load(false);
      };
      const fillNode = (ul: HTMLElement, prefix: string, names: string[]) => {
        const { groups, leaves } = treeLevel(prefix, names);
        const items: HTMLElement[] = [];
        for (const [g, count] of groups) {
          const sub = h('ul', { role: 'group' });
          const node = h('details', { 'data-prefix': g },
            h('summary', {}, h('a', { href: `#/points?prefix=${encodeURIComponent(g)}`, onclick: (e: Event) => { e.preventDefault(); pick(g); } }, g),
              h('span', { class: 'muted count' }, ` ${count}`)),
            sub);
          let filled = false;
          node.addEventListener('toggle', () => {
            if (node.open && !filled) {
              filled = true;
              fillNode(sub, g, names.filter((n) => n.startsWith(g)));
            }
          });
          items.push(h('li', { role: 'treeitem' }, node));
        }
        for (const n of leaves) {
          items.push(h('li', { role: 'treeitem', class: 'leaf' },
            h('a', { href: `#/points?prefix=${encodeURIComponent(n)}`, onclick: (e: Event) => { e.preventDefault(); pick(n); } }, n)));
        }
        ul.replaceChildren(...items);
      };
      const loadTree = async () => {
        try {
          const names: string[] = [];
          let cursor: string | null = null;
          do {
            const q = new URLSearchParams({ limit: '10000' });
            if (cursor) q.set('cursor', cursor);
            const pg: PointPage = await getJSON<PointPage>(`/api/v1/points?${q}`);
            for (const p of pg.points) names.push(p.name);
            cursor = pg.next;
          } while (cursor && gen >= 0);
          allNames = names;
          fillNode(tree, '', allNames);
        } catch (e) {
          tree.replaceChildren(h('li', { class: 'msg' }, `Cannot list the names: ${(e as Error).message}`));
        }
      };

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
        r.value.textContent = fmtValue(r.p.value, r.p.unit, r.p.name);
        /* never had a value: not a fault, nothing to alarm the eye */
        const none = r.p.quality === 'bad' && r.p.value === null && !r.p.ts;
        r.quality.textContent = none ? 'no value yet' : r.p.quality + (r.p.reason ? ` (${r.p.reason})` : '');
        r.quality.dataset.q = none ? 'none' : r.p.quality;
        r.age.textContent = r.p.ts ? fmtAge(Date.now() - r.p.ts) : '—';
        if (flash) {
          r.value.classList.remove('flash');
          void r.value.offsetWidth;
          r.value.classList.add('flash');
        }
      };

      const writeCell = (p: Point): HTMLTableCellElement => {
        if (!p.writable) return h('td', { class: 'muted nowrite', 'data-label': 'Write' }, '—');
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
        return h('td', { 'data-label': 'Write' }, form);
      };

      const addRows = (pts: Point[]) => {
        for (const p of pts) {
          const value = h('td', { class: 'num value', 'data-label': 'Value' });
          const quality = h('td', { class: 'q', 'data-label': 'Quality' });
          const age = h('td', { class: 'num age', 'data-label': 'Age' });
          const tr = h('tr', { 'data-name': p.name },
            h('td', { class: 'pname' }, h('a', { href: `#/trend?points=${encodeURIComponent(p.name)}`, title: 'Trend of this point' }, p.name)),
            value, quality, age,
            h('td', { 'data-label': 'Type' }, p.type), h('td', { class: 'desc', 'data-label': 'Description' }, p.description ?? ''),
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
      void loadTree();
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

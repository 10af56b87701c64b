// Alarm summary: the live summary from the stream (subscribe_alarms with the filter: the
// server filters by state, area, group, priority and text, and sends a snapshot, then only the
// rows that changed, or a fresh snapshot after a storm), colours by priority, acknowledge
// one or many with a comment, shelve and unshelve, the deployment state switch (admin), and
// the alarm history (GET /api/v1/alarm-events) with search.
//
// Rows are kept in a map by id and drawn at most once per animation frame and 200 ms, the
// first MAX_ROWS in the chosen order; a storm of changes costs one redraw per frame.
import { ApiError, getJSON, sendJSON, stream } from '../api';
import { debounce, fmtTime, fmtValue, h, type Page } from '../util';

const SUB_ID = 'alarm-summary';
const MAX_ROWS = 500;
const DRAW_MS = 200;

interface AlarmRow {
  id: string;
  alarm: string;
  threshold: string;
  area: string;
  group: string;
  priority: number;
  state: string;
  active: boolean;
  acked: boolean;
  value: number | null;
  limit: number | null;
  op: string;
  message: string;
  since: number;
  shelved: boolean;
  shelved_until: number;
  suppressed: boolean;
  out_of_service: boolean;
  ack?: { user: string; comment: string; ts: number };
  removed?: boolean;
}

interface AlarmEvent {
  ts: number;
  alarm: string;
  threshold: string;
  area: string;
  group: string;
  kind: string;
  state: string;
  value: number | null;
  limit: number | null;
  priority: number;
  message: string;
  user: string | null;
  comment: string | null;
}

/* The default filter: what needs an operator, active or not yet acknowledged (a returned
   alarm nobody acknowledged is still news). */
const DEFAULT_STATE = 'active,unack';
const STATES: [string, string][] = [[DEFAULT_STATE, 'Active or unacknowledged'], ['active', 'Active'], ['unack', 'Unacknowledged'], ['active_unack', 'Active, unacknowledged'],
  ['acked', 'Acknowledged'], ['rtn', 'Returned to normal, unacknowledged'], ['shelved', 'Shelved'], ['suppressed', 'Suppressed'],
  ['out_of_service', 'Out of service'], ['normal', 'Normal'], ['all', 'All']];

const STATE_LABELS: Record<string, string> = {
  normal: 'Normal', active_unack: 'Active, unacknowledged', active_ack: 'Active, acknowledged',
  rtn_unack: 'Returned, unacknowledged', rtn_ack: 'Returned, acknowledged',
};
const stateLabel = (s: string): string => STATE_LABELS[s] ?? s.replace(/_/g, ' ');
const KINDS: Record<string, string> = {
  active: 'raised', clear: 'returned to normal', ack: 'acknowledged', shelve: 'shelved', unshelve: 'unshelved',
  suppress: 'suppressed', unsuppress: 'unsuppressed', out_of_service: 'out of service', in_service: 'in service',
  deployment: 'deployment state',
};

export function alarmsPage(): Page {
  const rows = new Map<string, AlarmRow>();
  const trs = new Map<string, HTMLTableRowElement>();
  const selected = new Set<string>();
  let total = 0;
  let raf = 0;
  let lastDraw = 0;
  let stopped = false;
  let changesSeen = 0;

  return {
    title: 'Alarms',
    mount(root, params) {
      const fState = h('select', { id: 'al-state', 'aria-label': 'State' }, ...STATES.map(([v, l]) => h('option', { value: v }, l)));
      fState.value = params.get('state') ?? DEFAULT_STATE;
      if (fState.value === '') {
        /* a state list the menu does not have: keep it as asked */
        fState.prepend(h('option', { value: params.get('state')! }, params.get('state')!));
        fState.value = params.get('state')!;
      }
      const fArea = h('input', { id: 'al-area', placeholder: 'area', value: params.get('area') ?? '', 'aria-label': 'Area' });
      const fGroup = h('input', { id: 'al-group', placeholder: 'group', value: params.get('group') ?? '', 'aria-label': 'Group' });
      const fPrio = h('input', { id: 'al-priority', placeholder: 'priorities: 1,2', size: 10, value: params.get('priority') ?? '', 'aria-label': 'Priorities (comma-separated)' });
      const fText = h('input', { id: 'al-q', type: 'search', placeholder: 'text in name or message', value: params.get('q') ?? '', 'aria-label': 'Text' });
      const fSort = h('select', { id: 'al-sort', 'aria-label': 'Sort by' }, h('option', { value: 'priority' }, 'by priority'), h('option', { value: 'time' }, 'newest first'), h('option', { value: 'name' }, 'by name'));
      fSort.value = params.get('sort') ?? 'priority';
      const summary = h('p', { class: 'muted', id: 'al-summary', 'aria-live': 'polite' });
      const err = h('p', { class: 'msg', role: 'alert' });
      const comment = h('input', { id: 'al-comment', placeholder: 'comment', size: 30, 'aria-label': 'Comment for the action' });
      const shelveFor = h('select', { id: 'al-shelve-for', 'aria-label': 'Shelve for' }, ...['15m', '1h', '8h', '24h', '7d'].map((d) => h('option', { value: d }, d)));
      shelveFor.value = '1h';
      const actMsg = h('span', { class: 'wmsg', id: 'al-action-msg', role: 'status' });
      const selAll = h('input', { type: 'checkbox', id: 'al-select-all', 'aria-label': 'Select every shown alarm' });
      const tbody = h('tbody', { id: 'al-rows' });
      const depSel = h('select', { id: 'al-deployment', 'aria-label': 'Deployment state' });
      const depMsg = h('span', { class: 'wmsg', role: 'status' });
      const depBox = h('span', { hidden: true }, h('label', { for: 'al-deployment' }, 'Deployment state '), depSel, ' ', depMsg);

      const act = async (path: string, extra: Record<string, unknown>, what: string) => {
        const ids = [...selected].filter((id) => rows.has(id));
        if (!ids.length) {
          actMsg.textContent = 'select alarms first';
          actMsg.dataset.state = 'bad';
          return;
        }
        actMsg.textContent = '…';
        try {
          const body: Record<string, unknown> = { alarms: ids, ...extra };
          if (comment.value.trim()) body.comment = comment.value.trim();
          await sendJSON('POST', path, body);
          actMsg.textContent = `${what}: ${ids.length}`;
          actMsg.dataset.state = 'good';
          selected.clear();
          selAll.checked = false;
          for (const box of tbody.querySelectorAll<HTMLInputElement>('input[type=checkbox]')) box.checked = false;
          comment.value = '';
          schedule();
          historySoon();
        } catch (e) {
          actMsg.dataset.state = 'bad';
          actMsg.textContent = e instanceof ApiError && e.status === 403 ? `your token may not do this (${e.message})` : (e as Error).message;
        }
      };

      const filterForm = h('form', { class: 'toolbar', role: 'search' }, fState, fArea, fGroup, fPrio, fText, fSort, h('button', { type: 'submit' }, 'Filter'));
      const actions = h('div', { class: 'toolbar', role: 'group', 'aria-label': 'Actions on the selected alarms' },
        comment,
        h('button', { type: 'button', id: 'al-ack', class: 'primary', onclick: () => void act('/api/v1/alarms/ack', {}, 'acknowledged') }, 'Acknowledge'),
        shelveFor,
        h('button', { type: 'button', id: 'al-shelve', onclick: () => void act('/api/v1/alarms/shelve', { duration: shelveFor.value }, 'shelved') }, 'Shelve'),
        h('button', { type: 'button', id: 'al-unshelve', onclick: () => void act('/api/v1/alarms/unshelve', {}, 'unshelved') }, 'Unshelve'),
        actMsg);

      // ---- history ----
      const hRange = h('select', { id: 'ah-range', 'aria-label': 'History range' }, ...[['3600000', 'last hour'], ['28800000', 'last 8 h'], ['86400000', 'last 24 h'], ['604800000', 'last 7 days']].map(([v, l]) => h('option', { value: v }, l)));
      const hKind = h('select', { id: 'ah-kind', 'aria-label': 'Event kind' }, h('option', { value: '' }, 'any kind'),
        ...Object.entries(KINDS).map(([k, l]) => h('option', { value: k }, l)));
      const hText = h('input', { id: 'ah-q', type: 'search', placeholder: 'text in name, message or comment', 'aria-label': 'History text' });
      const hAlarm = h('input', { id: 'ah-alarm', placeholder: 'alarm (name or name/threshold)', 'aria-label': 'Alarm' });
      const hBody = h('tbody', { id: 'ah-rows' });
      const hMsg = h('p', { class: 'muted', id: 'ah-summary', 'aria-live': 'polite' });
      const hForm = h('form', { class: 'toolbar', role: 'search' }, hRange, hKind, hAlarm, hText, h('button', { type: 'submit' }, 'Search history'));
      const searchHistory = async () => {
        const q = new URLSearchParams({ from: String(Date.now() - Number(hRange.value)), order: 'desc', limit: '500' });
        if (hKind.value) q.set('kind', hKind.value);
        if (hText.value.trim()) q.set('q', hText.value.trim());
        if (hAlarm.value.trim()) q.set('alarm', hAlarm.value.trim());
        hMsg.textContent = 'Searching…';
        try {
          const r = await getJSON<{ events: AlarmEvent[]; count: number; more: boolean }>(`/api/v1/alarm-events?${q}`);
          hBody.replaceChildren(...r.events.map((e) => h('tr', { 'data-p': String(Math.min(e.priority, 4)), 'data-kind': e.kind },
            h('td', { class: 'muted time', 'data-label': 'Time' }, fmtTime(e.ts)), h('td', { 'data-label': 'Event' }, KINDS[e.kind] ?? e.kind),
            h('td', { 'data-label': 'Alarm' }, `${e.alarm}${e.threshold ? '/' + e.threshold : ''}`),
            h('td', { class: 'num', 'data-label': 'Priority' }, e.kind === 'deployment' ? '' : String(e.priority)),
            h('td', { 'data-state': e.state, 'data-label': 'State' }, stateLabel(e.state)),
            h('td', { class: 'num', 'data-label': 'Value' }, fmtValue(e.value, undefined, `alarm:${e.alarm}`)), h('td', { 'data-label': 'Message' }, e.message),
            h('td', { 'data-label': 'User' }, e.user ?? ''), h('td', { 'data-label': 'Comment' }, e.comment ?? ''))));
          hMsg.textContent = `${r.count} events${r.more ? ' (the newest 500; narrow the search for more)' : ''}`;
        } catch (e) {
          hMsg.textContent = `Cannot search the history: ${(e as Error).message}`;
        }
      };
      hForm.addEventListener('submit', (ev) => { ev.preventDefault(); void searchHistory(); });
      /* the history follows the summary: a change (raised, cleared, acknowledged) searches again */
      let historyTimer = 0;
      const historySoon = () => {
        if (historyTimer) return; /* at most one search a second, however many changes */
        historyTimer = window.setTimeout(() => {
          historyTimer = 0;
          if (!stopped) void searchHistory();
        }, 1000);
      };

      root.append(
        h('div', { class: 'title' }, h('h1', {}, 'Alarms'), h('span', { class: 'spacer' }),
          depBox),
        filterForm, summary, err, actions,
        h('div', { class: 'scroll' },
          h('table', { class: 'list alarms cards' },
            h('thead', {}, h('tr', {}, h('th', {}, selAll), h('th', {}, 'P'), h('th', {}, 'Alarm'), h('th', {}, 'State'),
              h('th', { class: 'num' }, 'Value'), h('th', { class: 'num' }, 'Limit'), h('th', {}, 'Message'), h('th', {}, 'Area'),
              h('th', {}, 'Group'), h('th', {}, 'Since'), h('th', {}, 'Acknowledged'))),
            tbody)),
        h('h2', { class: 'section' }, 'Alarm history'), hForm, hMsg,
        h('div', { class: 'scroll' },
          h('table', { class: 'list cards', id: 'ah-table' },
            h('thead', {}, h('tr', {}, h('th', {}, 'Time'), h('th', {}, 'Event'), h('th', {}, 'Alarm'), h('th', { class: 'num' }, 'P'),
              h('th', {}, 'State'), h('th', { class: 'num' }, 'Value'), h('th', {}, 'Message'), h('th', {}, 'User'), h('th', {}, 'Comment'))),
            hBody)),
      );

      // ---- the live summary ----
      const rowEl = (a: AlarmRow): HTMLTableRowElement => {
        const box = h('input', { type: 'checkbox', 'aria-label': `Select ${a.id}` });
        box.checked = selected.has(a.id);
        box.addEventListener('change', () => { if (box.checked) selected.add(a.id); else selected.delete(a.id); });
        const flags = [a.shelved ? `shelved until ${fmtTime(a.shelved_until)}` : '', a.suppressed ? 'suppressed' : '', a.out_of_service ? 'out of service' : ''].filter(Boolean).join(', ');
        return h('tr', { 'data-id': a.id, 'data-since': a.since, 'data-p': String(Math.min(Math.max(a.priority, 1), 4)), 'data-acked': String(a.acked), 'data-active': String(a.active) },
          h('td', { class: 'sel' }, box),
          h('td', { class: 'num prio', 'data-label': 'Priority' }, String(a.priority)),
          h('td', { class: 'aid', 'data-label': 'Alarm' }, a.id),
          h('td', { class: 'astate', 'data-state': a.state, 'data-label': 'State' }, stateLabel(a.state) + (flags ? ` (${flags})` : '')),
          h('td', { class: 'num', 'data-label': 'Value' }, fmtValue(a.value, undefined, `alarm:${a.alarm}`)),
          h('td', { class: 'num', 'data-label': 'Limit' }, `${a.op} ${fmtValue(a.limit)}`),
          h('td', { 'data-label': 'Message' }, a.message),
          h('td', { 'data-label': 'Area' }, a.area),
          h('td', { 'data-label': 'Group' }, a.group),
          h('td', { class: 'muted time', 'data-label': 'Since' }, a.since ? fmtTime(a.since) : ''),
          h('td', { class: 'ackc', 'data-label': 'Acknowledged' }, a.ack ? `${a.ack.user}${a.ack.comment ? ': ' + a.ack.comment : ''}` : ''));
      };

      const order = (a: AlarmRow, b: AlarmRow): number => {
        if (fSort.value === 'priority' && a.priority !== b.priority) return a.priority - b.priority;
        if (fSort.value !== 'name' && a.since !== b.since) return b.since - a.since;
        return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
      };

      const draw = () => {
        raf = 0;
        if (stopped) return;
        const now = performance.now();
        if (now - lastDraw < DRAW_MS) {
          raf = requestAnimationFrame(draw);
          return;
        }
        lastDraw = now;
        const list = [...rows.values()].sort(order).slice(0, MAX_ROWS);
        const els: HTMLTableRowElement[] = [];
        for (const a of list) {
          let tr = trs.get(a.id);
          if (!tr) {
            tr = rowEl(a);
            trs.set(a.id, tr);
          }
          els.push(tr);
        }
        tbody.replaceChildren(...els);
        const unacked = [...rows.values()].filter((a) => !a.acked).length;
        summary.textContent = `${total} alarms match (${unacked} unacknowledged)${rows.size > MAX_ROWS ? `; showing the first ${MAX_ROWS}: narrow the filter` : ''}`;
        tbody.dataset.changes = String(changesSeen);
      };
      function schedule() {
        if (!raf) raf = requestAnimationFrame(draw);
      }

      const filter = () => {
        const f: Record<string, string> = { state: fState.value };
        if (fArea.value.trim()) f.area = fArea.value.trim();
        if (fGroup.value.trim()) f.group = fGroup.value.trim();
        if (fPrio.value.trim()) f.priority = fPrio.value.replace(/\s+/g, '');
        if (fText.value.trim()) f.q = fText.value.trim();
        return f;
      };

      const subscribe = () => {
        const f = filter();
        const q = new URLSearchParams(f);
        if (fSort.value !== 'priority') q.set('sort', fSort.value);
        history.replaceState(null, '', `#/alarms?${q}`);
        err.textContent = '';
        stream.subscribeOp(SUB_ID, { op: 'subscribe_alarms', filter: f }, (m) => {
          if (m.op === 'alarms' && Array.isArray(m.alarms)) {
            rows.clear();
            trs.clear();
            for (const a of m.alarms as AlarmRow[]) rows.set(a.id, a);
            total = typeof m.total === 'number' ? m.total : rows.size;
            changesSeen++;
            schedule();
            historySoon();
          } else if (m.op === 'alarm_changes' && Array.isArray(m.changes)) {
            let eventful = false;
            for (const c of m.changes as AlarmRow[]) {
              const was = rows.get(c.id);
              /* a new event in the history, not just a new value */
              if (!was || c.removed || was.state !== c.state || was.acked !== c.acked || was.shelved !== c.shelved
                || was.suppressed !== c.suppressed || was.out_of_service !== c.out_of_service) eventful = true;
              trs.delete(c.id);
              if (c.removed) {
                if (rows.delete(c.id)) total--;
              } else {
                if (!rows.has(c.id)) total++;
                rows.set(c.id, c);
              }
            }
            changesSeen++;
            schedule();
            if (eventful) historySoon();
          }
        }, (code, message) => {
          err.textContent = code === 'bad_request' ? `Filter refused: ${message}` : `Alarm summary: ${message}`;
        });
      };

      filterForm.addEventListener('submit', (ev) => { ev.preventDefault(); subscribe(); });
      fState.addEventListener('change', subscribe);
      fSort.addEventListener('change', () => { subscribe(); trs.clear(); schedule(); });
      for (const i of [fArea, fGroup, fPrio, fText]) i.addEventListener('input', debounce(subscribe, 300));
      selAll.addEventListener('change', () => {
        selected.clear();
        if (selAll.checked) for (const tr of tbody.children) selected.add((tr as HTMLElement).dataset.id!);
        for (const box of tbody.querySelectorAll<HTMLInputElement>('input[type=checkbox]')) box.checked = selAll.checked;
      });

      // ---- deployment ----
      const loadDeployment = async () => {
        try {
          const d = await getJSON<{ state: string; states: Record<string, unknown> }>('/api/v1/deployment/state');
          const names = Object.keys(d.states ?? {});
          depSel.replaceChildren(...names.map((s) => h('option', { value: s }, s)));
          depSel.value = d.state;
          depBox.hidden = names.length < 2; /* nothing to switch to */
        } catch (e) {
          depMsg.textContent = e instanceof ApiError && e.status === 404 ? 'alarms are not configured' : (e as Error).message;
        }
      };
      depSel.addEventListener('change', async () => {
        depMsg.textContent = '…';
        try {
          const d = await sendJSON<{ state: string }>('PUT', '/api/v1/deployment/state', { state: depSel.value });
          depMsg.textContent = `now ${d.state}`;
          depMsg.dataset.state = 'good';
        } catch (e) {
          depMsg.dataset.state = 'bad';
          depMsg.textContent = e instanceof ApiError && e.status === 403 ? 'switching needs the admin role' : (e as Error).message;
          void loadDeployment();
        }
      });

      subscribe();
      void loadDeployment();
      void searchHistory();
    },
    unmount() {
      stopped = true;
      cancelAnimationFrame(raf);
      stream.unsubscribe(SUB_ID);
    },
  };
}

// Devices: the network device registry (NCMP routes, docs/API.md "Registry"). Search runs in
// the server (POST /ncmp/v1/ch/id-searches with cmHandleQueryParameters: state, modules,
// properties, DMI plugin); the page shows 100 devices at a time with their state, and a
// device's detail (properties, state, lock reason, modules) from /ncmp/v1/ch/{id} and
// /ncmp/v1/ch/{id}/modules, and the lifecycle events of the stream (a "devices" subscription):
// the last 100 in a list, a device's own in its detail; an event refreshes the shown page.
import { ApiError, getJSON, sendJSON, stream } from '../api';
import { debounce, fmtTime, h, type Page } from '../util';

const SUB_ID = 'devices-events';
const EVENTS_KEEP = 100;

interface LifeEvent {
  cmHandle: string;
  state: string;
  previous: string;
  lockReason?: string;
  details?: string;
  moduleSetTag?: string;
  ts: number;
}

const PAGE = 100;
const FULL_MAX = 2000; /* up to this many matches: one search with whole rows */

interface Handle {
  cmHandle: string;
  publicCmHandleProperties?: Record<string, string>[];
  state?: { cmHandleState: string; lockReason?: { reason: string; details?: string }; lastUpdateTime?: string };
  trustLevel?: string;
  moduleSetTag?: string;
  alternateId?: string;
  dataProducerIdentifier?: string;
}

interface Module {
  moduleName: string;
  revision?: string;
  cmHandle?: string;
}

type Cond = { conditionName: string; conditionParameters: Record<string, string>[] };

function props(hd: Handle): Record<string, string> {
  return Object.assign({}, ...(hd.publicCmHandleProperties ?? []));
}

export function devicesPage(): Page {
  let timer = 0;
  let gen = 0;
  let stopped = false;

  return {
    title: 'Devices',
    mount(root, params) {
      const state = h('select', { id: 'dv-state', 'aria-label': 'State' },
        ...['', 'ADVISED', 'READY', 'LOCKED', 'DELETING'].map((s) => h('option', { value: s }, s || 'any state')));
      state.value = params.get('state') ?? '';
      const modules = h('input', { id: 'dv-modules', placeholder: 'has modules: a, b', value: params.get('modules') ?? '', 'aria-label': 'Has all these modules (comma-separated)' });
      const propsIn = h('input', { id: 'dv-props', placeholder: 'properties: site=north, …', value: params.get('props') ?? '', 'aria-label': 'Has all these properties (name=value, comma-separated)' });
      const plugin = h('input', { id: 'dv-plugin', placeholder: 'DMI plugin', value: params.get('plugin') ?? '', 'aria-label': 'DMI plugin' });
      const summary = h('p', { class: 'muted', id: 'dv-summary', 'aria-live': 'polite' });
      const err = h('p', { class: 'msg', role: 'alert' });
      const tbody = h('tbody', { id: 'dv-rows' });
      const prev = h('button', { type: 'button', disabled: true }, '◀ Previous');
      const next = h('button', { type: 'button', disabled: true }, 'Next ▶');
      const detail = h('section', { class: 'card', id: 'dv-detail', hidden: true, 'aria-live': 'polite' });
      const eventList = h('ol', { class: 'events', id: 'dv-events', reversed: true });
      const lostNote = h('p', { class: 'muted' });
      const events: LifeEvent[] = [];
      const eventRow = (e: LifeEvent) => h('li', { 'data-id': e.cmHandle },
        h('time', { class: 'muted' }, fmtTime(e.ts)), ' ',
        h('button', { type: 'button', class: 'link', onclick: () => void showDetail(e.cmHandle) }, e.cmHandle), ' ',
        e.previous === e.state ? `created (${e.state})` : `${e.previous} → ${e.state}`,
        e.lockReason ? ` (${e.lockReason}${e.details ? ': ' + e.details : ''})` : '');
      const form = h('form', { class: 'toolbar', role: 'search' }, state, modules, propsIn, plugin, h('button', { type: 'submit' }, 'Search'));
      root.append(
        h('div', { class: 'title' }, h('h1', {}, 'Devices')),
        form, summary, err,
        h('div', { class: 'split' },
          h('div', {},
            h('div', { class: 'scroll' },
              h('table', { class: 'list points cards' },
                h('thead', {}, h('tr', {}, h('th', {}, 'Device'), h('th', {}, 'State'), h('th', {}, 'Module set'),
                  h('th', {}, 'Alternate id'), h('th', {}, 'Properties'), h('th', {}, 'Updated'))),
                tbody)),
            h('div', { class: 'toolbar' }, prev, next)),
          detail),
        h('section', { class: 'card' }, h('h2', {}, 'Lifecycle events (live, newest first)'), lostNote, eventList),
      );

      let ids: string[] = [];
      let offset = 0;
      let openId = params.get('id') ?? '';

      const conditions = (): Cond[] => {
        const c: Cond[] = [];
        if (state.value) c.push({ conditionName: 'cmHandleWithState', conditionParameters: [{ state: state.value }] });
        const mods = modules.value.split(',').map((s) => s.trim()).filter(Boolean);
        if (mods.length) c.push({ conditionName: 'hasAllModules', conditionParameters: mods.map((m) => ({ moduleName: m })) });
        const ps = propsIn.value.split(',').map((s) => s.trim()).filter(Boolean);
        if (ps.length) {
          c.push({
            conditionName: 'hasAllProperties',
            conditionParameters: ps.map((p) => {
              const i = p.indexOf('=');
              return i < 0 ? { [p]: '' } : { [p.slice(0, i).trim()]: p.slice(i + 1).trim() };
            }),
          });
        }
        if (plugin.value.trim()) c.push({ conditionName: 'cmHandleWithDmiPlugin', conditionParameters: [{ dmiPluginName: plugin.value.trim() }] });
        return c;
      };

      const stateCell = (hd: Handle) => {
        const s = hd.state?.cmHandleState ?? '?';
        const lock = hd.state?.lockReason ? ` (${hd.state.lockReason.reason})` : '';
        return h('td', { class: 'state', 'data-state': s, 'data-label': 'State' }, s + lock);
      };

      const showDetail = async (id: string) => {
        openId = id;
        saveUrl();
        detail.hidden = false;
        detail.replaceChildren(h('h2', {}, id), h('p', { class: 'muted' }, 'Loading…'));
        try {
          const enc = encodeURIComponent(id);
          const [hd, mods] = await Promise.all([
            getJSON<Handle>(`/ncmp/v1/ch/${enc}`),
            getJSON<Module[]>(`/ncmp/v1/ch/${enc}/modules`).catch(() => [] as Module[]),
          ]);
          if (openId !== id || stopped) return;
          const p = props(hd);
          const lock = hd.state?.lockReason;
          detail.replaceChildren(
            h('div', { class: 'title' }, h('h2', {}, `Device ${hd.cmHandle}`),
              h('button', { type: 'button', class: 'link', 'aria-label': 'Close the detail', onclick: () => { openId = ''; detail.hidden = true; saveUrl(); } }, '✕')),
            h('dl', { class: 'facts' },
              ...([
                ['State', hd.state?.cmHandleState ?? '?'],
                ['Lock reason', lock ? `${lock.reason}${lock.details ? ': ' + lock.details : ''}` : '—'],
                ['Last change', hd.state?.lastUpdateTime ?? '—'],
                ['Trust level', hd.trustLevel || '—'],
                ['Module set tag', hd.moduleSetTag || '—'],
                ['Alternate id', hd.alternateId || '—'],
                ['Data producer', hd.dataProducerIdentifier || '—'],
              ] as [string, string][]).flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])),
            h('h2', {}, 'Properties'),
            Object.keys(p).length
              ? h('table', { class: 'kv' }, h('tbody', {}, ...Object.entries(p).map(([k, v]) => h('tr', {}, h('th', { scope: 'row' }, k), h('td', {}, v)))))
              : h('p', { class: 'muted' }, 'none'),
            h('h2', {}, `Modules (${mods.length})`),
            mods.length
              ? h('table', { class: 'list', id: 'dv-modules-list' }, h('thead', {}, h('tr', {}, h('th', {}, 'Module'), h('th', {}, 'Revision'))),
                h('tbody', {}, ...mods.map((m) => h('tr', {}, h('td', {}, m.moduleName), h('td', {}, m.revision ?? '')))))
              : h('p', { class: 'muted' }, hd.state?.cmHandleState === 'READY' ? 'none' : 'not synchronised yet'),
            h('h2', {}, 'Lifecycle events seen on this page'),
            h('ol', { class: 'events', id: 'dv-detail-events' }, ...events.filter((e) => e.cmHandle === id).map(eventRow)),
          );
        } catch (e) {
          if (openId === id) detail.replaceChildren(h('h2', {}, id), h('p', { class: 'msg' }, (e as Error).message));
        }
      };

      const renderRows = (rows: Handle[]) => {
        tbody.replaceChildren(...rows.map((hd) => {
          const p = props(hd);
          return h('tr', { 'data-id': hd.cmHandle },
            h('td', { class: 'pname' }, h('button', { type: 'button', class: 'link', onclick: () => void showDetail(hd.cmHandle) }, hd.cmHandle)),
            stateCell(hd),
            h('td', { 'data-label': 'Module set' }, hd.moduleSetTag ?? ''),
            h('td', { 'data-label': 'Alternate id' }, hd.alternateId ?? ''),
            h('td', { class: 'desc', 'data-label': 'Properties' }, Object.entries(p).map(([k, v]) => `${k}=${v}`).join(', ')),
            h('td', { class: 'muted', 'data-label': 'Updated' }, hd.state?.lastUpdateTime?.replace(/\.\d+\+0000$/, 'Z').replace('T', ' ') ?? ''));
        }));
      };

      const saveUrl = () => {
        const q = new URLSearchParams();
        if (state.value) q.set('state', state.value);
        if (modules.value.trim()) q.set('modules', modules.value.trim());
        if (propsIn.value.trim()) q.set('props', propsIn.value.trim());
        if (plugin.value.trim()) q.set('plugin', plugin.value.trim());
        if (openId) q.set('id', openId);
        history.replaceState(null, '', `#/devices${q.toString() ? '?' + q : ''}`);
      };

      const load = async (resetOffset: boolean) => {
        const my = ++gen;
        clearTimeout(timer);
        if (resetOffset) offset = 0;
        saveUrl();
        try {
          const body = { cmHandleQueryParameters: conditions() };
          let rows: Handle[];
          if (resetOffset || ids.length <= FULL_MAX) {
            ids = await sendJSON<string[]>('POST', '/ncmp/v1/ch/id-searches', body);
          }
          if (my !== gen) return;
          if (ids.length <= FULL_MAX) {
            const all = await sendJSON<Handle[]>('POST', '/ncmp/v1/ch/searches', body);
            all.sort((a, b) => (a.cmHandle < b.cmHandle ? -1 : a.cmHandle > b.cmHandle ? 1 : 0));
            ids = all.map((x) => x.cmHandle);
            rows = all.slice(offset, offset + PAGE);
          } else {
            ids.sort();
            const page = ids.slice(offset, offset + PAGE);
            rows = [];
            for (let i = 0; i < page.length; i += 10) {
              const got = await Promise.all(page.slice(i, i + 10).map((id) =>
                getJSON<Handle>(`/ncmp/v1/ch/${encodeURIComponent(id)}`).catch(() => null)));
              for (const g of got) if (g) rows.push(g);
            }
          }
          if (my !== gen) return;
          err.textContent = '';
          renderRows(rows);
          summary.textContent = ids.length === 0 ? 'No device matches.' : `${offset + 1}–${offset + rows.length} of ${ids.length} devices`;
          prev.disabled = offset === 0;
          next.disabled = offset + PAGE >= ids.length;
        } catch (e) {
          if (my !== gen) return;
          err.textContent = e instanceof ApiError && e.status === 404
            ? 'The device registry is not enabled on this server (no registry: section in its configuration).'
            : `Cannot search devices: ${(e as Error).message}`;
          tbody.replaceChildren();
          summary.textContent = '';
        }
        if (!stopped && my === gen) timer = window.setTimeout(() => void load(false), 15000);
      };

      form.addEventListener('submit', (ev) => {
        ev.preventDefault();
        void load(true);
      });
      state.addEventListener('change', () => void load(true));
      for (const i of [modules, propsIn, plugin]) i.addEventListener('input', debounce(() => void load(true), 400));
      prev.addEventListener('click', () => { offset = Math.max(0, offset - PAGE); void load(false); });
      next.addEventListener('click', () => { offset += PAGE; void load(false); });
      const refreshSoon = debounce(() => { if (!stopped) void load(false); }, 300);
      stream.subscribe(SUB_ID, { devices: {} }, () => {}, (_c, m) => { lostNote.textContent = `Events: ${m}`; }, (m) => {
        if (m.op !== 'devices' || !Array.isArray(m.events)) return;
        const evs = m.events as LifeEvent[];
        for (const e of evs) {
          events.unshift(e);
          eventList.prepend(eventRow(e));
        }
        while (events.length > EVENTS_KEEP) {
          events.pop();
          eventList.lastElementChild?.remove();
        }
        if (typeof m.lost === 'number' && m.lost > 0) lostNote.textContent = `${m.lost} events were dropped (too many at once): the list below is partial.`;
        refreshSoon();
        if (openId && evs.some((e) => e.cmHandle === openId)) void showDetail(openId);
      });
      void load(true);
      if (openId) void showDetail(openId);
    },
    unmount() {
      stream.unsubscribe(SUB_ID);
      stopped = true;
      gen++;
      clearTimeout(timer);
    },
  };
}

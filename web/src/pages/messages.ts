// Messages: the message journal. Search runs in the server (GET /api/v1/messages: full text,
// endpoint, type, conversation, time range, sort, keyset paging with a total); a message's
// detail shows its derived fields, every header, and its body: text pretty-printed (JSON
// indented), binary as a hex dump, a body over the stored maximum described by its size and
// hash. The conversation view lists a conversation's messages in the order they were sent.
// Failed imports can be listed and imported again (operator).
import { ApiError, getBytes, getJSON, sendJSON } from '../api';
import { fmtBytes, fmtTime, h, type Page } from '../util';

const LIMIT = 50;
const HEX_MAX = 64 * 1024;

interface Msg {
  id: string;
  receiving_endpoint: string | null;
  type: string;
  intent: string;
  conversation_id: string;
  related_to: string;
  sending_endpoint: string;
  sending_host: string;
  receiving_host: string;
  content_type: string;
  id_derived: boolean;
  time_sent: number | null;
  processing_started: number | null;
  processed_at: number | null;
  received_at: number | null;
  processing_ms: number | null;
  critical_ms: number | null;
  delivery_ms: number | null;
  is_system: boolean;
  body: { state: string; size: number; hash: string | null };
  headers?: Record<string, string>;
  body_text?: string | null;
}

interface Failed {
  id: number;
  at: number;
  reason: string;
  source: string;
  message_id: string | null;
  headers: unknown;
  body_size: number;
}

const shortType = (t: string) => (t || '').split(',')[0];
const when = (ms: number | null) => (ms === null || ms === undefined ? '—' : fmtTime(ms));
const ms = (v: number | null) => (v === null || v === undefined ? '—' : `${v} ms`);

export function hexDump(b: Uint8Array, max = HEX_MAX): string {
  const lines: string[] = [];
  const n = Math.min(b.length, max);
  for (let off = 0; off < n; off += 16) {
    const row = b.subarray(off, Math.min(off + 16, n));
    const hex = [...row].map((x) => x.toString(16).padStart(2, '0')).join(' ');
    const asc = [...row].map((x) => (x >= 0x20 && x < 0x7f ? String.fromCharCode(x) : '.')).join('');
    lines.push(`${off.toString(16).padStart(8, '0')}  ${hex.padEnd(47)}  ${asc}`);
  }
  if (b.length > max) lines.push(`… ${b.length - max} more bytes`);
  return lines.join('\n');
}

function pretty(text: string, ctype: string): string {
  const t = text.trim();
  if (/json/i.test(ctype) || t.startsWith('{') || t.startsWith('[')) {
    try {
      return JSON.stringify(JSON.parse(t), null, 2);
    } catch {
      /* not JSON after all */
    }
  }
  return text;
}

export function messagesPage(): Page {
  let gen = 0;
  let stopped = false;

  return {
    title: 'Messages',
    mount(root, params) {
      const q = h('input', { id: 'ms-q', type: 'search', placeholder: 'words in headers or body', value: params.get('q') ?? '', 'aria-label': 'Full-text search' });
      const endpoint = h('input', { id: 'ms-endpoint', placeholder: 'endpoint', size: 14, value: params.get('endpoint') ?? '', 'aria-label': 'Endpoint (sending or receiving)' });
      const type = h('input', { id: 'ms-type', placeholder: 'message type', size: 18, value: params.get('type') ?? '', 'aria-label': 'Message type' });
      const conv = h('input', { id: 'ms-conv', placeholder: 'conversation id', size: 14, value: params.get('conversation') ?? '', 'aria-label': 'Conversation id' });
      const range = h('select', { id: 'ms-range', 'aria-label': 'Time range' },
        ...[['3600000', 'last hour'], ['86400000', 'last 24 h'], ['604800000', 'last 7 days'], ['', 'any time']].map(([v, l]) => h('option', { value: v }, l)));
      range.value = params.get('range') ?? '';
      const sort = h('select', { id: 'ms-sort', 'aria-label': 'Sort by' },
        ...[['processed_at', 'processed, newest'], ['time_sent', 'sent, newest'], ['processing_time', 'slowest processing'], ['critical_time', 'slowest critical time']].map(([v, l]) => h('option', { value: v }, l)));
      sort.value = params.get('sort') ?? 'processed_at';
      const summary = h('p', { class: 'muted', id: 'ms-summary', 'aria-live': 'polite' });
      const err = h('p', { class: 'msg', role: 'alert' });
      const tbody = h('tbody', { id: 'ms-rows' });
      const more = h('button', { type: 'button', hidden: true }, 'Show more');
      const detail = h('section', { class: 'card', id: 'ms-detail', hidden: true, 'aria-live': 'polite' });
      const failedBox = h('section', { class: 'card', id: 'ms-failed', hidden: true });
      const form = h('form', { class: 'toolbar', role: 'search' }, q, endpoint, type, conv, range, sort, h('button', { type: 'submit' }, 'Search'),
        h('button', { type: 'button', id: 'ms-show-failed', onclick: () => void showFailed() }, 'Failed imports'));
      root.append(
        h('div', { class: 'title' }, h('h1', {}, 'Messages')),
        form, summary, err, failedBox,
        h('div', { class: 'split' },
          h('div', {},
            h('div', { class: 'scroll' },
              h('table', { class: 'list cards' },
                h('thead', {}, h('tr', {}, h('th', {}, 'Processed'), h('th', {}, 'Type'), h('th', {}, 'From → to'), h('th', {}, 'Intent'),
                  h('th', {}, 'Conversation'), h('th', { class: 'num' }, 'Processing'), h('th', { class: 'num' }, 'Body'))),
                tbody)),
            more),
          detail),
      );

      let next: string | null = null;
      let total = 0;
      let shown = 0;

      const saveUrl = () => {
        const p = new URLSearchParams();
        for (const [k, el] of [['q', q], ['endpoint', endpoint], ['type', type], ['conversation', conv]] as [string, HTMLInputElement][])
          if (el.value.trim()) p.set(k, el.value.trim());
        if (range.value) p.set('range', range.value);
        if (sort.value !== 'processed_at') p.set('sort', sort.value);
        history.replaceState(null, '', `#/messages${p.toString() ? '?' + p : ''}`);
      };

      const row = (m: Msg) => h('tr', { 'data-id': m.id },
        h('td', { class: 'muted', 'data-label': 'Processed' }, when(m.processed_at)),
        h('td', { 'data-label': 'Type' }, h('button', { type: 'button', class: 'link', onclick: () => void showDetail(m.id, m.receiving_endpoint) }, shortType(m.type) || m.id)),
        h('td', { 'data-label': 'From → to' }, `${m.sending_endpoint || '?'} → ${m.receiving_endpoint || '?'}`),
        h('td', { 'data-label': 'Intent' }, m.intent || ''),
        h('td', { 'data-label': 'Conversation' }, m.conversation_id ? h('button', { type: 'button', class: 'link', onclick: () => void showConversation(m.conversation_id) }, m.conversation_id) : ''),
        h('td', { class: 'num', 'data-label': 'Processing' }, ms(m.processing_ms)),
        h('td', { class: 'num', 'data-label': 'Body' }, m.body.state === 'none' ? '—' : fmtBytes(m.body.size)));

      const search = async (append: boolean) => {
        const my = ++gen;
        saveUrl();
        const p = new URLSearchParams({ limit: String(LIMIT), sort: sort.value, direction: 'desc' });
        if (q.value.trim()) p.set('q', q.value.trim());
        if (endpoint.value.trim()) p.set('endpoint', endpoint.value.trim());
        if (type.value.trim()) p.set('type', type.value.trim());
        if (conv.value.trim()) p.set('conversation', conv.value.trim());
        if (range.value) p.set('from', String(Date.now() - Number(range.value)));
        if (append && next) p.set('cursor', next);
        summary.textContent = 'Searching…';
        try {
          const r = await getJSON<{ messages: Msg[]; total: number; next: string | null }>(`/api/v1/messages?${p}`);
          if (my !== gen || stopped) return;
          err.textContent = '';
          if (!append) {
            tbody.replaceChildren();
            shown = 0;
          }
          tbody.append(...r.messages.map(row));
          shown += r.messages.length;
          total = r.total;
          next = r.next;
          more.hidden = !next;
          summary.textContent = total === 0 ? 'No message matches.' : `${shown} of ${total} messages`;
        } catch (e) {
          if (my !== gen) return;
          summary.textContent = '';
          err.textContent = e instanceof ApiError && e.status === 404 && e.code === 'not_found'
            ? 'The message journal is not enabled on this server (no journal: section in its configuration).'
            : `Cannot search messages: ${(e as Error).message}`;
        }
      };

      const showBody = async (m: Msg, box: HTMLElement) => {
        if (m.body.state === 'none') {
          box.replaceChildren(h('p', { class: 'muted' }, 'no body'));
          return;
        }
        if (m.body.state === 'not_stored') {
          box.replaceChildren(h('p', { class: 'muted' }, `${fmtBytes(m.body.size)}, over the journal's maximum: not stored (sha256 ${m.body.hash ?? '?'})`));
          return;
        }
        if (typeof m.body_text === 'string') {
          box.replaceChildren(h('pre', { class: 'body', id: 'ms-body' }, pretty(m.body_text, m.content_type)));
          return;
        }
        try {
          const enc = m.receiving_endpoint ? `?endpoint=${encodeURIComponent(m.receiving_endpoint)}` : '';
          const { bytes, type: ct } = await getBytes(`/api/v1/messages/${encodeURIComponent(m.id)}/body${enc}`);
          let text: string | null = null;
          if (!/octet-stream|protobuf|avro|binary/i.test(ct + m.content_type)) {
            try {
              text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
            } catch {
              text = null;
            }
          }
          box.replaceChildren(text !== null
            ? h('pre', { class: 'body', id: 'ms-body' }, pretty(text, ct || m.content_type))
            : h('pre', { class: 'body hex', id: 'ms-body', 'aria-label': 'Body as hexadecimal' }, hexDump(bytes)));
        } catch (e) {
          box.replaceChildren(h('p', { class: 'msg' }, `Cannot read the body: ${(e as Error).message}`));
        }
      };

      const showDetail = async (id: string, recv: string | null) => {
        detail.hidden = false;
        detail.replaceChildren(h('h2', {}, id), h('p', { class: 'muted' }, 'Loading…'));
        try {
          const enc = recv ? `?endpoint=${encodeURIComponent(recv)}` : '';
          const m = await getJSON<Msg>(`/api/v1/messages/${encodeURIComponent(id)}${enc}`);
          if (stopped) return;
          const bodyBox = h('div', {});
          const heads = Object.entries(m.headers ?? {}).sort(([a], [b]) => (a < b ? -1 : 1));
          detail.replaceChildren(
            h('div', { class: 'title' }, h('h2', {}, `Message ${m.id}`),
              h('button', { type: 'button', class: 'link', 'aria-label': 'Close the detail', onclick: () => { detail.hidden = true; } }, '✕')),
            h('dl', { class: 'facts' }, ...([
              ['Type', m.type], ['Intent', m.intent], ['From', `${m.sending_endpoint} (${m.sending_host || '?'})`],
              ['To', `${m.receiving_endpoint ?? '?'} (${m.receiving_host || '?'})`], ['Conversation', m.conversation_id],
              ['Related to', m.related_to || '—'], ['Sent', when(m.time_sent)], ['Processing started', when(m.processing_started)],
              ['Processed', when(m.processed_at)], ['Processing', ms(m.processing_ms)], ['Critical time', ms(m.critical_ms)],
              ['Delivery', ms(m.delivery_ms)], ['Content type', m.content_type || '—'],
              ['Body', m.body.state === 'none' ? 'none' : `${fmtBytes(m.body.size)} (${m.body.state})`],
            ] as [string, string][]).flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v ?? '—')])),
            h('p', {}, m.conversation_id ? h('button', { type: 'button', onclick: () => void showConversation(m.conversation_id) }, 'Conversation view') : ''),
            h('h2', {}, `Headers (${heads.length})`),
            h('table', { class: 'kv headers', id: 'ms-headers' }, h('tbody', {}, ...heads.map(([k, v]) => h('tr', {}, h('th', { scope: 'row' }, k), h('td', {}, String(v)))))),
            h('h2', {}, 'Body'),
            bodyBox,
          );
          await showBody(m, bodyBox);
        } catch (e) {
          detail.replaceChildren(h('h2', {}, id), h('p', { class: 'msg' }, (e as Error).message));
        }
      };

      const showConversation = async (id: string) => {
        detail.hidden = false;
        detail.replaceChildren(h('h2', {}, `Conversation ${id}`), h('p', { class: 'muted' }, 'Loading…'));
        try {
          const c = await getJSON<{ conversation: string; messages: Msg[]; total: number }>(`/api/v1/conversations/${encodeURIComponent(id)}`);
          if (stopped) return;
          const t0 = c.messages.length ? c.messages[0].time_sent ?? 0 : 0;
          detail.replaceChildren(
            h('div', { class: 'title' }, h('h2', {}, `Conversation ${c.conversation}`),
              h('button', { type: 'button', class: 'link', 'aria-label': 'Close the conversation', onclick: () => { detail.hidden = true; } }, '✕')),
            h('p', { class: 'muted' }, `${c.total} messages, in the order they were sent`),
            h('ol', { class: 'conversation', id: 'ms-conversation' }, ...c.messages.map((m) => h('li', { 'data-id': m.id },
              h('span', { class: 'muted' }, `+${(m.time_sent ?? t0) - t0} ms `),
              h('button', { type: 'button', class: 'link', onclick: () => void showDetail(m.id, m.receiving_endpoint) }, shortType(m.type) || m.id),
              ` ${m.sending_endpoint || '?'} → ${m.receiving_endpoint || '?'} (${m.intent || '?'})`))),
          );
        } catch (e) {
          detail.replaceChildren(h('h2', {}, id), h('p', { class: 'msg' }, (e as Error).message));
        }
      };

      const showFailed = async () => {
        failedBox.hidden = false;
        failedBox.replaceChildren(h('h2', {}, 'Failed imports'), h('p', { class: 'muted' }, 'Loading…'));
        try {
          const f = await getJSON<{ failed: Failed[]; total: number }>('/api/v1/journal/failed?limit=100');
          const msg = h('span', { class: 'wmsg', role: 'status' });
          failedBox.replaceChildren(
            h('div', { class: 'title' }, h('h2', {}, `Failed imports (${f.total})`), msg,
              h('button', { type: 'button', class: 'link', 'aria-label': 'Close failed imports', onclick: () => { failedBox.hidden = true; } }, '✕')),
            f.failed.length
              ? h('table', { class: 'list' }, h('thead', {}, h('tr', {}, h('th', {}, 'When'), h('th', {}, 'Reason'), h('th', {}, 'Source'), h('th', {}, 'Message id'), h('th', { class: 'num' }, 'Body'), h('th', {}, ''))),
                h('tbody', {}, ...f.failed.map((x) => h('tr', { 'data-failed': String(x.id) },
                  h('td', { class: 'muted' }, fmtTime(x.at)), h('td', {}, x.reason), h('td', {}, x.source), h('td', {}, x.message_id ?? '—'),
                  h('td', { class: 'num' }, fmtBytes(x.body_size)),
                  h('td', {}, h('button', { type: 'button', onclick: async () => {
                    try {
                      await sendJSON('POST', `/api/v1/journal/failed/${x.id}/reimport`, {});
                      msg.textContent = `imported again: ${x.message_id ?? x.id}`;
                      msg.dataset.state = 'good';
                      void showFailed();
                    } catch (e) {
                      msg.textContent = (e as Error).message;
                      msg.dataset.state = 'bad';
                    }
                  } }, 'Import again'))))))
              : h('p', { class: 'muted' }, 'none'),
          );
        } catch (e) {
          failedBox.replaceChildren(h('h2', {}, 'Failed imports'), h('p', { class: 'msg' }, (e as Error).message));
        }
      };

      form.addEventListener('submit', (ev) => { ev.preventDefault(); void search(false); });
      for (const s of [range, sort]) s.addEventListener('change', () => void search(false));
      more.addEventListener('click', () => void search(true));
      void search(false);
    },
    unmount() {
      stopped = true;
      gen++;
    },
  };
}

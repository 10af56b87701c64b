// The opsd API as the pages use it: REST calls with the operator's token, one shared
// WebSocket stream with subscriptions that survive reconnects, and the "unauthorized" signal
// that sends the user to the login page.

const TOKEN_KEY = 'opsd.token';

export function getToken(): string | null {
  return sessionStorage.getItem(TOKEN_KEY) ?? localStorage.getItem(TOKEN_KEY);
}

export function setToken(token: string | null, remember = false): void {
  sessionStorage.removeItem(TOKEN_KEY);
  localStorage.removeItem(TOKEN_KEY);
  if (token) (remember ? localStorage : sessionStorage).setItem(TOKEN_KEY, token);
}

type Listener = () => void;
const unauthorizedListeners: Listener[] = [];
export function onUnauthorized(f: Listener): void {
  unauthorizedListeners.push(f);
}
function unauthorized(): void {
  for (const f of unauthorizedListeners) f();
}

export class ApiError extends Error {
  constructor(public status: number, public code: string, message: string) {
    super(message);
  }
}

function headers(extra?: HeadersInit, token = getToken()): Headers {
  const h = new Headers(extra);
  if (token) h.set('Authorization', `Bearer ${token}`);
  return h;
}

const OPEN_KEY = 'opsd.open';
/** Whether this server answers without a token: true, false, or null while no request
 *  without one has told (kept per tab, so the login page need not ask again). */
export function serverOpen(): boolean | null {
  const v = sessionStorage.getItem(OPEN_KEY);
  return v === null ? null : v === '1';
}

async function request(path: string, init: RequestInit = {}, token?: string | null): Promise<Response> {
  const tok = token === undefined ? getToken() : token;
  const r = await fetch(path, { ...init, headers: headers(init.headers, tok) });
  if (!tok && path.startsWith('/api/') && (r.ok || r.status === 401)) sessionStorage.setItem(OPEN_KEY, r.ok ? '1' : '0');
  if (r.ok) return r;
  let code = 'http_' + r.status;
  let message = r.statusText || `HTTP ${r.status}`;
  try {
    const j = await r.json();
    if (j && j.error) {
      code = j.error.code ?? code;
      message = j.error.message ?? message;
    } else if (j && typeof j.status === 'string' && typeof j.message === 'string') {
      // the NCMP paths answer NCMP's {status, message, details}; details is opsd's code
      code = j.details ?? code;
      message = j.message;
    }
  } catch {
    /* not JSON */
  }
  if (r.status === 401 && token === undefined) unauthorized();
  throw new ApiError(r.status, code, message);
}

export async function getJSON<T>(path: string): Promise<T> {
  return (await request(path)).json() as Promise<T>;
}

export async function getText(path: string): Promise<string> {
  return (await request(path)).text();
}

export async function getBytes(path: string): Promise<{ bytes: Uint8Array; type: string }> {
  const r = await request(path);
  return { bytes: new Uint8Array(await r.arrayBuffer()), type: r.headers.get('Content-Type') ?? '' };
}

export async function sendJSON<T>(method: string, path: string, body: unknown): Promise<T> {
  const r = await request(path, {
    method,
    body: JSON.stringify(body),
    headers: { 'Content-Type': 'application/json' },
  });
  return r.json() as Promise<T>;
}

/** Checks a token against the server without touching the stored one. */
export async function tryToken(token: string): Promise<void> {
  await request('/api/v1/status', {}, token);
}

// ---- shapes (docs/API.md) ----

export type Quality = 'good' | 'uncertain' | 'bad';
export type PointValue = number | boolean | string | null;

export interface Point {
  name: string;
  type: 'double' | 'int' | 'bool' | 'string';
  unit?: string;
  description?: string;
  writable: boolean;
  value: PointValue;
  ts?: number;
  quality: Quality;
  reason?: string;
}

export interface PointPage {
  points: Point[];
  next: string | null;
  total: number;
}

/** [name, value, ts, quality, reason?] */
export type StreamValue = [string, PointValue, number, Quality, string?];

export interface Status {
  version: string;
  uptime_s: number;
  points: number;
  clients: number;
  subscriptions: number;
  point_updates?: number;
  drivers?: { name: string; type: string; points: number; samples?: number }[];
  config?: string;
  reloads?: { ok: number; failed: number };
  history?: Record<string, number>;
  [key: string]: unknown;
}

export type Metrics = Map<string, number>;

/** Prometheus text: "name{labels} value" lines into a map keyed by "name{labels}". */
export function parseMetrics(text: string): Metrics {
  const m: Metrics = new Map();
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#') continue;
    const i = line.lastIndexOf(' ');
    if (i <= 0) continue;
    const v = Number(line.slice(i + 1));
    if (!Number.isNaN(v)) m.set(line.slice(0, i), v);
  }
  return m;
}

// ---- the stream ----

export interface SubscribeRequest {
  devices?: { states?: string[]; prefix?: string; tag?: string };
  points?: string[];
  prefix?: string;
  interval?: string | number;
  deadband?: number;
}

interface Sub {
  msg: Record<string, unknown>; /* the subscribe message without its id */
  onValues: (values: StreamValue[]) => void;
  onError?: (code: string, message: string) => void;
  onOther?: (m: Record<string, unknown>) => void; /* other ops for this id (e.g. "devices") */
}

export type StreamState = 'connecting' | 'open' | 'closed';

/** One WebSocket for the whole page; subscriptions are sent again after a reconnect. */
export class Stream {
  private ws: WebSocket | null = null;
  private subs = new Map<string, Sub>();
  private retryMs = 500;
  private timer = 0;
  private stopped = true;
  private stateListeners: ((s: StreamState, why?: string) => void)[] = [];
  state: StreamState = 'closed';

  onState(f: (s: StreamState, why?: string) => void): void {
    this.stateListeners.push(f);
    f(this.state);
  }

  private setState(s: StreamState, why?: string): void {
    this.state = s;
    for (const f of this.stateListeners) f(s, why);
  }

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.connect();
  }

  /** Closes and forgets the connection (a new token: call start again). */
  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    if (this.ws) {
      this.ws.onclose = null;
      this.ws.close();
      this.ws = null;
    }
    this.setState('closed');
  }

  restart(): void {
    this.stop();
    this.start();
  }

  private connect(): void {
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const tok = getToken();
    const url = `${proto}//${location.host}/api/v1/stream${tok ? `?token=${encodeURIComponent(tok)}` : ''}`;
    this.setState('connecting');
    const ws = new WebSocket(url);
    this.ws = ws;
    ws.onopen = () => {
      this.retryMs = 500;
      this.setState('open');
      for (const [id, s] of this.subs) this.send({ ...s.msg, id });
    };
    ws.onmessage = (ev) => {
      let m: { op: string; id?: string; values?: StreamValue[]; error?: { code: string; message: string }; [k: string]: unknown };
      try {
        m = JSON.parse(ev.data as string);
      } catch {
        return;
      }
      const s = m.id !== undefined ? this.subs.get(m.id) : undefined;
      if (!s) return;
      if (m.op === 'update' && m.values) s.onValues(m.values);
      else if (m.op === 'error' && m.error) s.onError?.(m.error.code, m.error.message);
      else s.onOther?.(m);
    };
    let opened = false;
    ws.addEventListener('open', () => { opened = true; });
    ws.onclose = (ev) => {
      this.ws = null;
      if (ev.code === 1008 && /unauthorized/.test(ev.reason)) {
        this.signedOut();
        return;
      }
      if (!opened) {
        // The server refuses an upgrade without a valid token with HTTP 401, which a browser
        // does not show to the page: a REST call with the same token tells.
        void fetch('/api/v1/status', { headers: headers() }).then((r) => {
          if (r.status === 401 && !this.stopped) {
            window.clearTimeout(this.timer);
            this.signedOut();
          }
        }, () => {});
      }
      this.setState('closed', ev.reason || undefined);
      if (this.stopped) return;
      this.timer = window.setTimeout(() => this.connect(), this.retryMs);
      this.retryMs = Math.min(this.retryMs * 2, 10000);
    };
  }

  private signedOut(): void {
    this.stopped = true;
    this.setState('closed', 'unauthorized');
    unauthorized();
  }

  private send(obj: unknown): void {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(obj));
  }

  subscribe(id: string, req: SubscribeRequest, onValues: Sub['onValues'], onError?: Sub['onError'], onOther?: Sub['onOther']): void {
    this.subscribeOp(id, { op: 'subscribe', ...req }, onOther ?? (() => {}), onError, onValues);
  }

  /** A subscription with its own op (e.g. "subscribe_alarms"); every answer but errors goes to onMessage. */
  subscribeOp(id: string, msg: Record<string, unknown>, onMessage: (m: Record<string, unknown>) => void,
    onError?: Sub['onError'], onValues: Sub['onValues'] = () => {}): void {
    this.subs.set(id, { msg, onValues, onError, onOther: onMessage });
    this.send({ ...msg, id });
  }

  unsubscribe(id: string): void {
    if (!this.subs.delete(id)) return;
    this.send({ op: 'unsubscribe', id });
  }
}

export const stream = new Stream();

// The single-page shell: navigation, the hash router (#/points?prefix=tank1-), the stream's
// connection indicator, and the switch to the login page when the server asks for a token.
import './style.css';
import { getJSON, getToken, onUnauthorized, setToken, stream } from './api';
import { h, type Page } from './util';
import { overviewPage } from './pages/overview';
import { pointsPage } from './pages/points';
import { trendPage } from './pages/trend';
import { devicesPage } from './pages/devices';
import { alarmsPage } from './pages/alarms';
import { messagesPage } from './pages/messages';
import { loginPage } from './pages/login';
import { displayPage, startPage } from './pages/display';

const routes: Record<string, () => Page> = {
  overview: overviewPage,
  display: displayPage,
  displays: displayPage,
  points: pointsPage,
  trend: trendPage,
  devices: devicesPage,
  alarms: alarmsPage,
  messages: messagesPage,
  login: loginPage,
};
const navItems: [string, string][] = [
  ['overview', 'Overview'],
  ['displays', 'Displays'],
  ['points', 'Points'],
  ['trend', 'Trend'],
  ['alarms', 'Alarms'],
  ['devices', 'Devices'],
  ['messages', 'Messages'],
];

const main = document.getElementById('main')!;
const nav = document.getElementById('nav')!;
const conn = document.getElementById('conn')!;
const signout = document.getElementById('signout') as HTMLButtonElement;
const themeBtn = document.getElementById('theme') as HTMLButtonElement;
let current: Page | null = null;
let currentName = '';

for (const [name, label] of navItems) nav.append(h('a', { href: `#/${name}`, 'data-page': name }, label));

function parseHash(): [string, URLSearchParams] {
  /* no page asked for: the start page chosen on this device, else the overview */
  const raw = location.hash.replace(/^#\/?/, '') || startPage() || '';
  const q = raw.indexOf('?');
  const name = (q < 0 ? raw : raw.slice(0, q)) || 'overview';
  return [name, new URLSearchParams(q < 0 ? '' : raw.slice(q + 1))];
}

function route(): void {
  const [name, params] = parseHash();
  const make = routes[name];
  if (!make) {
    location.replace('#/overview');
    return;
  }
  current?.unmount();
  main.replaceChildren();
  currentName = name;
  current = make();
  document.title = `${current.title} · opsd`;
  for (const a of nav.querySelectorAll('a')) {
    if (a.dataset.page === name || (a.dataset.page === 'displays' && name === 'display')) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  signout.hidden = !getToken() || name === 'login';
  if (name !== 'login' && authKnown) stream.start();
  current.mount(main, params);
}

// The stream starts once a REST call has shown that the token (or no token) is accepted,
// so a server with tokens never sees an anonymous stream connection from this page.
let authKnown = false;

onUnauthorized(() => {
  stream.stop();
  const [name, params] = parseHash();
  if (currentName === 'login' || name === 'login') return;
  const next = `${name}${params.toString() ? '?' + params.toString() : ''}`;
  location.hash = `#/login?next=${encodeURIComponent(next)}${getToken() ? '&bad=1' : ''}`;
});

signout.addEventListener('click', () => {
  setToken(null);
  stream.stop();
  location.hash = '#/login';
});

stream.onState((s, why) => {
  conn.textContent = s === 'open' ? 'live' : s === 'connecting' ? 'connecting…' : why === 'unauthorized' ? 'signed out' : 'offline';
  conn.dataset.state = s;
});

// The theme: the system's (prefers-color-scheme) unless this device chose one; the button
// goes system -> dark -> light -> system. Pages that draw on a canvas redraw on 'opsd-theme'.
const THEME_KEY = 'opsd.theme';
const darkQuery = window.matchMedia('(prefers-color-scheme: dark)');
function applyTheme(): void {
  const chosen = localStorage.getItem(THEME_KEY);
  const dark = chosen === 'dark' || (chosen !== 'light' && darkQuery.matches);
  document.documentElement.dataset.theme = dark ? 'dark' : 'light';
  document.documentElement.style.colorScheme = dark ? 'dark' : 'light';
  themeBtn.textContent = chosen === 'dark' ? '☾' : chosen === 'light' ? '☀' : '◐';
  const what = chosen ? `${chosen} (chosen here)` : `follows the system (now ${dark ? 'dark' : 'light'})`;
  themeBtn.title = `Theme: ${what}; click to change`;
  themeBtn.setAttribute('aria-label', `Theme: ${what}`);
  window.dispatchEvent(new Event('opsd-theme'));
}
themeBtn.addEventListener('click', () => {
  const chosen = localStorage.getItem(THEME_KEY);
  const nextTheme = chosen === null ? 'dark' : chosen === 'dark' ? 'light' : null;
  if (nextTheme) localStorage.setItem(THEME_KEY, nextTheme);
  else localStorage.removeItem(THEME_KEY);
  applyTheme();
});
darkQuery.addEventListener('change', applyTheme);
applyTheme();

window.addEventListener('hashchange', route);
route();
getJSON('/api/v1/status')
  .then(() => {
    authKnown = true;
    if (currentName !== 'login') stream.start();
  })
  .catch(() => {
    /* 401: onUnauthorized shows the login page, which starts the stream after sign-in */
  });

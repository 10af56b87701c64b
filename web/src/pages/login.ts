// The login page: asks for an API token (the same tokens as the API, server.auth.tokens),
// checks it against /api/v1/status, keeps it for this tab (or on this device), then goes on
// to the page that asked for it. On a server without tokens it says so and offers the way in.
import { ApiError, serverOpen, setToken, stream, tryToken } from '../api';
import { h, type Page } from '../util';

export function loginPage(): Page {
  return {
    title: 'Sign in',
    mount(root, params) {
      const n = params.get('next') || 'overview';
      const next = n.startsWith('login') ? 'overview' : n;
      const input = h('input', { id: 'token', type: 'password', autocomplete: 'current-password', required: true, 'aria-describedby': 'login-msg' });
      const remember = h('input', { id: 'remember', type: 'checkbox' });
      const msg = h('p', { id: 'login-msg', class: 'msg', role: 'alert' });
      if (params.get('bad')) msg.textContent = 'The stored token was refused: enter a valid one.';
      const intro = h('p', { id: 'login-intro' }, 'Checking whether this server asks for a token…');
      const form = h('form', { class: 'card login', 'aria-labelledby': 'login-title' },
        h('h1', { id: 'login-title' }, 'Sign in to opsd'),
        intro,
        h('label', { for: 'token' }, 'Token'),
        input,
        h('label', { class: 'check' }, remember, ' Remember on this device'),
        h('button', { type: 'submit', class: 'primary' }, 'Sign in'),
        msg,
      );
      form.addEventListener('submit', async (ev) => {
        ev.preventDefault();
        msg.textContent = 'Checking…';
        try {
          await tryToken(input.value.trim());
          setToken(input.value.trim(), remember.checked);
          stream.restart();
          location.hash = `#/${next}`;
        } catch (e) {
          msg.textContent = e instanceof ApiError && e.status === 401 ? 'This token is not valid.' : `Cannot check the token: ${(e as Error).message}`;
          input.select();
        }
      });
      root.append(form);
      input.focus();
      // A server without tokens answers without one: nothing to sign in to. (Asked once per
      // tab: a refused request shows in the browser's console.)
      const known = serverOpen();
      (known === null ? tryToken('') : known ? Promise.resolve() : Promise.reject(new Error('needs a token'))).then(() => {
        intro.textContent = 'This server does not ask for a token: every page is open to whoever reaches it.';
        for (const el of form.querySelectorAll('label, input, button')) (el as HTMLElement).hidden = true;
        form.append(h('a', { href: `#/${next}`, class: 'button primary', id: 'login-continue' }, 'Continue'));
        setToken(null);
        stream.restart();
      }, () => {
        intro.textContent = 'This server needs an API token (the same tokens as the REST API and opsctl).';
      });
    },
    unmount() {},
  };
}

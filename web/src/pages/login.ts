// The login page: asks for an API token (the same tokens as the API, server.auth.tokens),
// checks it against /api/v1/status, keeps it for this tab (or on this device), then goes on
// to the page that asked for it.
import { ApiError, setToken, stream, tryToken } from '../api';
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
      const form = h('form', { class: 'card login', 'aria-labelledby': 'login-title' },
        h('h1', { id: 'login-title' }, 'Sign in to opsd'),
        h('p', {}, 'This server needs an API token (the same tokens as the REST API and opsctl).'),
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
    },
    unmount() {},
  };
}

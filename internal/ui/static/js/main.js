// The UI's shell: who the caller is (GET /api/whoami), sign-in by token
// for auth "kubernetes", and the hash router over the pages.
import { get, setToken, token, ApiError } from './api.js';
import { h, replace } from './dom.js';
import { may, setWho, whoami } from './session.js';
import { clustersPage } from './clusters.js';
import { capacityPage } from './capacity.js';
import { podsPage } from './pods.js';
import { podPage } from './pod.js';
import { submitPage } from './submit.js';

let cleanup = null;

async function loadWho() {
  try {
    setWho(await get('/api/whoami'));
  } catch (e) {
    setWho(null);
    return e;
  }
  return null;
}

function renderWho() {
  const el = document.getElementById('who');
  const w = whoami();
  document.getElementById('nav-submit').hidden = !may('create');
  if (!w) { replace(el); return; }
  const name = w.auth === 'none' ? 'anonymous (auth none)' : w.user;
  const parts = [h('span', { text: 'Signed in as ' }), h('strong', { id: 'who-user', text: name })];
  if (w.auth === 'kubernetes' && token()) {
    parts.push(h('button', { type: 'button', text: 'Sign out', onclick: () => { setToken(''); start(); } }));
  }
  replace(el, ...parts);
}

function signIn(main, err) {
  const input = h('input', { type: 'password', id: 'token', autocomplete: 'off', required: true });
  const msg = h('p', { class: 'error', id: 'signin-error', text: token() ? err.message : '' });
  const form = h('form', { class: 'signin', onsubmit: async (ev) => {
    ev.preventDefault();
    setToken(input.value.trim());
    const e = await loadWho();
    if (e) { msg.textContent = e.message; setToken(''); return; }
    renderWho();
    route();
  } },
  h('h1', { text: 'Sign in' }),
  h('p', { class: 'muted', text: 'This API checks a Kubernetes bearer token of the hub cluster. The token stays in this tab (sessionStorage) and is sent only to this controller.' }),
  h('label', { for: 'token', text: 'Hub token' }), input, msg,
  h('button', { class: 'primary', type: 'submit', id: 'signin-go', text: 'Sign in' }));
  replace(main, form);
  input.focus();
}

const routes = [
  [/^#\/clusters$/, 'clusters', () => clustersPage],
  [/^#\/capacity$/, 'capacity', () => capacityPage],
  [/^#\/pods$/, 'pods', () => podsPage],
  [/^#\/pods\/([a-z0-9-]{1,63})$/, 'pods', () => podPage],
  [/^#\/submit$/, 'submit', () => submitPage],
];

function route() {
  const main = document.getElementById('main');
  if (cleanup) { cleanup(); cleanup = null; }
  if (!whoami()) return;
  const [hash, query] = (location.hash || '#/clusters').split('?');
  let match = null, nav = '', page = null;
  for (const [re, n, p] of routes) {
    const m = hash.match(re);
    if (m) { match = m; nav = n; page = p(); break; }
  }
  for (const a of document.querySelectorAll('[data-nav]')) {
    if (a.dataset.nav === nav) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  if (!page) { replace(main, h('h1', { text: 'Not found' }), h('p', {}, h('a', { href: '#/clusters', text: 'Clusters' }))); return; }
  const ctrl = new AbortController();
  cleanup = () => ctrl.abort();
  page(main, match.slice(1), ctrl.signal, new URLSearchParams(query || ''));
}

async function start() {
  const main = document.getElementById('main');
  const err = await loadWho();
  renderWho();
  if (err) {
    if (err instanceof ApiError && err.status === 401) { signIn(main, err); return; }
    replace(main, h('h1', { text: 'The API is not answering' }), h('p', { class: 'error', text: err.message }),
      h('button', { type: 'button', text: 'Retry', onclick: start }));
    return;
  }
  route();
}

// A request refused as unauthenticated (an expired token, say): sign in
// again, once, rather than show each page's error.
let restarting = false;
window.addEventListener('crucible:unauthenticated', () => {
  if (restarting || !whoami()) return;
  restarting = true;
  if (cleanup) { cleanup(); cleanup = null; }
  start().finally(() => { restarting = false; });
});

window.addEventListener('hashchange', () => { route(); document.getElementById('main').focus({ preventScroll: true }); });
start();

// The public API as the UI uses it: JSON requests carrying the signed-in
// token (auth "kubernetes") and the CSRF header, and server-sent events read
// with fetch, because EventSource cannot send an Authorization header.

const TOKEN_KEY = 'crucible.token';

export function token() { return sessionStorage.getItem(TOKEN_KEY) || ''; }
export function setToken(t) {
  if (t) sessionStorage.setItem(TOKEN_KEY, t); else sessionStorage.removeItem(TOKEN_KEY);
}

// ApiError carries the HTTP status and the API's message.
export class ApiError extends Error {
  constructor(status, message, field) { super(message); this.status = status; this.field = field; }
}

function headers(extra) {
  const hd = new Headers(extra || {});
  const t = token();
  if (t) hd.set('Authorization', 'Bearer ' + t);
  return hd;
}

async function failure(resp) {
  if (resp.status === 401) window.dispatchEvent(new Event('crucible:unauthenticated')); // e.g. the token expired
  let msg = resp.status + ' ' + resp.statusText, field;
  try {
    const body = await resp.json();
    if (body && typeof body.error === 'string') { msg = body.error; field = body.field; }
  } catch { /* not JSON */ }
  return new ApiError(resp.status, msg, field);
}

// request sends one API call; it returns {body, headers}. extra are more
// request headers (an Idempotency-Key).
export async function request(method, path, body, signal, extra = {}) {
  const init = { method, headers: headers({ Accept: 'application/json', ...extra }), signal, credentials: 'same-origin' };
  if (method !== 'GET') {
    init.headers.set('Content-Type', 'application/json');
    init.headers.set('X-Crucible-Client', 'crucible-ui');
    init.body = JSON.stringify(body ?? {});
  }
  const resp = await fetch(path, init);
  if (!resp.ok) throw await failure(resp);
  return { body: await resp.json(), headers: resp.headers };
}

export const get = (path, signal) => request('GET', path, undefined, signal).then((r) => r.body);

// download fetches path with the caller's credentials and saves it as name.
export async function download(path, name) {
  const resp = await fetch(path, { headers: headers(), credentials: 'same-origin' });
  if (!resp.ok) throw await failure(resp);
  const url = URL.createObjectURL(await resp.blob());
  const a = document.createElement('a');
  a.href = url; a.download = name; a.hidden = true;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
}

// stream reads an SSE endpoint until signal aborts, reconnecting with
// Last-Event-ID after a broken connection (backing off up to 10s).
// onEvent(name, data, id) gets parsed JSON data; returning 'stop' ends the
// stream. onStatus(text) reports connection trouble ('' when fine).
// onOpen() runs on every connect, once the server has answered: the API
// subscribes before it answers, so what a page reads from onOpen on cannot
// miss a change the stream would have carried.
export async function stream(path, { onEvent, onStatus = () => {}, onOpen = () => {}, signal, lastId = '' }) {
  let backoff = 500;
  while (!signal.aborted) {
    try {
      const hd = headers({ Accept: 'text/event-stream' });
      if (lastId) hd.set('Last-Event-ID', lastId);
      const resp = await fetch(path, { headers: hd, signal, credentials: 'same-origin', cache: 'no-store' });
      if (!resp.ok) {
        const err = await failure(resp);
        if (resp.status < 500 && resp.status !== 429) { onStatus(err.message); return; }
        throw err;
      }
      onStatus('');
      onOpen();
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '', name = '', data = '', id = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        // Lines are found by index and the rest kept once per chunk: a
        // replay of 100,000 lines arrives in large chunks.
        let at = 0, nl;
        while ((nl = buf.indexOf('\n', at)) >= 0) {
          let line = buf.slice(at, nl);
          at = nl + 1;
          if (line.endsWith('\r')) line = line.slice(0, -1);
          if (line === '') {
            if (name) {
              let parsed = null;
              try { parsed = JSON.parse(data); } catch { /* ignored below */ }
              if (id) lastId = id;
              if (onEvent(name, parsed, id) === 'stop') { reader.cancel().catch(() => {}); return; }
            }
            name = ''; data = ''; id = '';
            continue;
          }
          const colon = line.indexOf(':');
          if (colon === 0) continue; // a comment (keep-alive)
          const field = colon < 0 ? line : line.slice(0, colon);
          const val = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
          if (field === 'event') name = val;
          else if (field === 'data') data = val;
          else if (field === 'id') id = val;
        }
        buf = buf.slice(at);
      }
      backoff = 500;
    } catch (e) {
      if (signal.aborted) return;
      onStatus('reconnecting: ' + e.message);
    }
    await new Promise((r) => setTimeout(r, backoff));
    backoff = Math.min(backoff * 2, 10000);
  }
}

// Pods: newest first, filtered by cluster, state and kind, searched by id,
// paged through the API's continue token, and kept current by the stream
// of changes (GET /api/events) without reloading. A row's reason is why it
// finished, else why it waits.
import { get, request, stream } from './api.js';
import { h, replace, fmtAge, fmtTime, stateCell } from './dom.js';
import { whoami } from './session.js';
import { waitBadge } from './timeline.js';

const STATES = ['pending', 'dispatched', 'running', 'succeeded', 'failed', 'cancelled', 'lost'];
export const PAGE = 50;

function select(id, label, options, value) {
  const sel = h('select', { id }, h('option', { value: '', text: 'all' }), options.map((o) => h('option', { value: o, text: o, selected: o === value })));
  return [h('div', {}, h('label', { for: id, text: label }), sel), sel];
}

export function podsPage(main, _params, signal, query) {
  const f = { cluster: query.get('cluster') || '', state: query.get('state') || '', kind: query.get('kind') || '', q: query.get('q') || '' };
  const clusters = Object.keys((whoami() && whoami().clusters) || {}).sort();
  const [clusterBox, clusterSel] = select('f-cluster', 'Cluster', clusters, f.cluster);
  const [stateBox, stateSel] = select('f-state', 'State', STATES, f.state);
  const [kindBox, kindSel] = select('f-kind', 'Kind', ['turn', 'loop'], f.kind);
  const search = h('input', { type: 'search', id: 'f-id', value: f.q, placeholder: 'pod id', autocomplete: 'off' });
  const tbody = h('tbody', { id: 'pod-rows' });
  const err = h('p', { class: 'error', id: 'pods-error', role: 'alert' });
  const live = h('span', { class: 'muted', id: 'live-status', text: 'connecting…' });
  const more = h('button', { type: 'button', id: 'more', text: 'Load more', hidden: true });
  const shown = h('span', { class: 'muted', id: 'shown' });
  replace(main,
    h('h1', { text: 'Pods' }),
    h('form', { class: 'toolbar', role: 'search', onsubmit: (ev) => {
      ev.preventDefault();
      const id = search.value.trim();
      if (/^[a-z0-9-]{1,63}$/.test(id) && rows.has(id)) location.hash = '#/pods/' + id;
      else if (/^[a-z0-9-]{1,63}$/.test(id)) openById(id);
    } },
    clusterBox, stateBox, kindBox,
    h('div', {}, h('label', { for: 'f-id', text: 'Search by id (Enter opens)' }), search), live),
    err,
    h('table', { class: 'pods' },
      h('caption', { class: 'sr-only', text: 'Work pods, newest first' }),
      h('colgroup', {}, [0, 1, 2, 3, 4, 5, 6, 7].map((i) => h('col', { class: 'pc' + i }))),
      h('thead', {}, h('tr', {}, ['ID', 'Cluster', 'Kind', 'State', 'Exit', 'Created', 'Submitter', 'Reason'].map((t) => h('th', { scope: 'col', text: t })))),
      tbody),
    h('div', { class: 'pager' }, more, shown));

  const rows = new Map(); // id -> {tr, pod}
  let next = '';

  const matches = (p) => (!f.cluster || p.cluster === f.cluster) && (!f.kind || p.kind === f.kind) &&
    (!f.state || p.state === f.state) && (!f.q || p.id.includes(f.q));

  function rowCells(p) {
    return [
      h('td', { class: 'mono' }, h('a', { href: '#/pods/' + p.id, text: p.id })),
      h('td', { text: p.cluster }), h('td', { text: p.kind }), h('td', {}, stateCell(p.state)),
      h('td', { class: 'num', text: p.exit_code ?? '' }),
      h('td', { class: 'num', title: fmtTime(p.created_at), text: fmtAge(p.created_at) }),
      h('td', { title: p.submitter || '', text: p.submitter || '' }),
      !p.reason && p.waiting ? h('td', {}, waitBadge(p.waiting)) : h('td', { title: p.reason || '', text: p.reason || '' }),
    ];
  }

  // put shows p, unless its row shows a later change already: a list read
  // before a change can land after the change's event.
  function put(p, front) {
    const have = rows.get(p.id);
    if (have && Date.parse(have.pod.updated_at) > Date.parse(p.updated_at)) return;
    if (have) { replace(have.tr, ...rowCells(p)); have.pod = p; return; }
    const tr = h('tr', { 'data-pod': p.id }, ...rowCells(p));
    rows.set(p.id, { tr, pod: p });
    if (front) tbody.prepend(tr); else tbody.append(tr);
  }

  function countShown() { shown.textContent = rows.size + ' shown' + (next ? '' : ' (all)'); }

  // olderThanList: p was created before the newest row of a list, so the
  // list would have had it had it matched (it belongs further down, if at all).
  const olderThanList = (body, p) => body.length > 0 && Date.parse(p.created_at) < Date.parse(body[0].created_at);

  async function load(append) {
    const q = new URLSearchParams({ limit: String(PAGE) });
    for (const k of ['cluster', 'state', 'kind']) if (f[k]) q.set(k, f[k]);
    if (append && next) q.set('continue', next);
    try {
      const { body, headers } = await request('GET', '/api/pods?' + q, undefined, signal);
      if (!append) {
        // Rows the stream put while the list was asked for are kept where
        // they are newer: newer than the list, or created after it was read.
        const streamed = [...rows.values()].map((r) => r.pod);
        rows.clear(); tbody.replaceChildren();
        for (const p of body) if (matches(p)) put(p, false);
        for (const p of streamed) if (rows.has(p.id)) put(p); else if (matches(p) && !olderThanList(body, p)) put(p, true);
      } else {
        for (const p of body) if (matches(p)) put(p, false);
      }
      next = headers.get('Crucible-Continue') || '';
      more.hidden = !next;
      err.textContent = '';
      countShown();
    } catch (e) {
      if (!signal.aborted) err.textContent = 'Could not list pods: ' + e.message;
    }
  }

  async function openById(id) {
    try { await get('/api/pods/' + id, signal); location.hash = '#/pods/' + id; } catch (e) { err.textContent = e.message; }
  }

  function changed() {
    f.cluster = clusterSel.value; f.state = stateSel.value; f.kind = kindSel.value; f.q = search.value.trim();
    const q = new URLSearchParams();
    for (const k of ['cluster', 'state', 'kind', 'q']) if (f[k]) q.set(k, f[k]);
    history.replaceState(null, '', '#/pods' + (q.size ? '?' + q : ''));
    load(false);
  }
  for (const el of [clusterSel, stateSel, kindSel]) el.addEventListener('change', changed);
  search.addEventListener('input', () => {
    f.q = search.value.trim();
    for (const { tr, pod } of rows.values()) tr.hidden = !matches(pod);
  });
  more.addEventListener('click', () => load(true));

  // Live rows. Only this controller replica's changes arrive (see the API).
  const eq = new URLSearchParams();
  if (f.cluster) eq.set('cluster', f.cluster);
  if (f.kind) eq.set('kind', f.kind);
  // The list is read once the stream is open: read before, a change between
  // the read and the subscription would never reach the page. Reconnects
  // resume with Last-Event-ID (or get a reset, which re-lists). A stream that
  // cannot open at all still leaves the list read once.
  let listed = false;
  const listOnce = () => { if (!listed) { listed = true; load(false); } };
  stream('/api/events?' + eq, {
    signal,
    onOpen: listOnce,
    onStatus: (s) => { live.textContent = s || 'live'; if (s) listOnce(); },
    onEvent: (name, p) => {
      if (name === 'reset') { load(false); return; }
      if (name !== 'pod' || !p) return;
      if (rows.has(p.id)) { put(p); rows.get(p.id).tr.hidden = !matches(p); }
      else if (matches(p)) { put(p, true); countShown(); }
    },
  });
}

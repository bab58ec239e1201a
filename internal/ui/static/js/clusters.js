// Clusters: one table row a spoke, from GET /api/clusters: health probed by
// the controller, and live pods by state, counted by the server for the
// whole fleet in one query (a request per spoke would cost a hundred
// spokes a hundred requests every reload, each listing a page). A fleet of
// 20 or more spokes is read by sorting and filtering, not by scanning cards:
// any column sorts, the filter keeps names or servers with its text, and
// both live in the URL (#/clusters?sort=running&dir=desc&q=gpu), so that a
// shared link shows the same view and the reload every 10 s keeps it. A
// row's name opens all a card used to show, the last error in full.
import { get } from './api.js';
import { h, replace, fmtAge, fmtTime, fmtDuration } from './dom.js';

const LIVE = ['pending', 'dispatched', 'running'];
const RELOAD_MS = 10000;

// HEALTH ranks a probe's outcome from best to worst: descending, the spokes
// that need a look come first.
const HEALTH = ['healthy', 'not checked', 'credentials invalid', 'unreachable'];

// Names sort as people read them: spoke-2 before spoke-10.
const collator = new Intl.Collator(undefined, { numeric: true });

// COLUMNS are the table's, in order: what a column sorts on (a number sorts
// as one, null last in either direction) and its cell.
// The owner column says which replica runs a cluster's loops with leader
// election (a Lease per spoke), "—" otherwise.
const COLUMNS = [
  { key: 'name', label: 'Cluster', sort: (r) => r.c.name, cell: nameCell },
  { key: 'health', label: 'Health', sort: (r) => HEALTH.indexOf(r.health), cell: healthCell },
  { key: 'expiry', label: 'Token expires', sort: (r) => r.expiry, cell: expiryCell },
  { key: 'owner', label: 'Loops on', sort: (r) => r.c.owner || null, cell: ownerCell },
  { key: 'gpus', label: 'GPUs free', sort: (r) => r.gpus.free, cell: gpusCell },
  ...LIVE.map((s) => ({ key: s, label: s[0].toUpperCase() + s.slice(1), sort: (r) => (r.counts.n ? r.counts.n[s] : null), cell: (r) => countCell(r, s) })),
  { key: 'server', label: 'API server', sort: (r) => r.c.server, cell: (r) => h('td', { class: 'mono', title: r.c.server, text: r.c.server }) },
  { key: 'namespace', label: 'Loop namespace', sort: (r) => r.c.loop_namespace || null, cell: (r) => h('td', { class: 'mono', text: r.c.loop_namespace || '' }) },
  { key: 'checked', label: 'Checked', sort: (r) => r.checked, cell: (r) => h('td', { class: 'num', text: r.checked ? fmtAge(r.checked) : '—' }) },
  { key: 'error', label: 'Last error', sort: (r) => r.hl.last_error || null, cell: (r) => h('td', { class: r.hl.last_error ? 'bad' : 'muted', text: r.hl.last_error || 'none' }) },
];

export function clustersPage(main, _params, signal, query) {
  const view = viewFrom(query);
  const open = new Set(); // the names whose details are shown
  const countdowns = [];
  let rows = null; // null until the first load

  const filter = h('input', { type: 'search', id: 'cl-filter', value: view.q, autocomplete: 'off', spellcheck: false,
    oninput: () => { view.q = filter.value; saveView(view); render(); } });
  const count = h('p', { class: 'muted count', id: 'cl-count', role: 'status' });
  const caption = h('caption', { class: 'sr-only' });
  const thead = h('thead', {}, h('tr', {}, COLUMNS.map((col) => h('th', { scope: 'col', 'data-col': col.key },
    h('button', { type: 'button', class: 'sort', 'data-sort': col.key, onclick: () => sortOn(col.key) },
      col.label, h('span', { class: 'arrow', 'aria-hidden': 'true' }))))));
  const tbody = h('tbody', { id: 'cl-rows' });
  const err = h('p', { class: 'error', id: 'clusters-error' });
  replace(main, h('h1', { text: 'Clusters' }),
    h('div', { class: 'toolbar', role: 'search' },
      h('div', {}, h('label', { for: 'cl-filter', text: 'Filter by name or server' }), filter), count),
    err,
    h('div', { class: 'tablewrap' }, h('table', { class: 'clusters', id: 'clusters' }, caption,
      h('colgroup', {}, COLUMNS.map((col) => h('col', { class: 'cc-' + col.key }))), thead, tbody)));

  function sortOn(key) {
    view.dir = view.sort === key && view.dir === 'asc' ? 'desc' : 'asc';
    view.sort = key;
    saveView(view);
    render();
  }

  const toggle = (name, button) => {
    const shown = !open.has(name);
    if (shown) open.add(name); else open.delete(name);
    button.setAttribute('aria-expanded', String(shown));
    document.getElementById(detailId(name)).hidden = !shown;
  };

  function render() {
    markSort(thead, caption, view);
    if (!rows) return;
    const shown = ordered(rows.filter((r) => matches(r, view.q)), view);
    // A reload replaces the rows: the control that had the focus gets it back.
    const focused = tbody.contains(document.activeElement) ? document.activeElement.dataset.focus : undefined;
    countdowns.length = 0;
    const ctx = { open, countdowns, toggle };
    replace(tbody, shown.length ? shown.map((r) => [row(r, ctx), detailRow(r, ctx)]) : emptyRow(rows.length, view.q));
    const n = shown.length + ' of ' + rows.length + ' clusters';
    if (count.textContent !== n) count.textContent = n; // a live region: said again only when it changes
    if (focused) {
      const again = [...tbody.querySelectorAll('[data-focus]')].find((el) => el.dataset.focus === focused);
      if (again) again.focus({ preventScroll: true });
    }
    tick();
  }

  const tick = () => {
    for (const [el, exp] of countdowns) {
      const left = exp - Date.now();
      el.textContent = left > 0 ? 'in ' + fmtDuration(left) : 'expired ' + fmtDuration(-left) + ' ago';
      el.className = left > 60000 ? 'ok' : 'bad';
    }
  };

  let loading = false;
  const load = async () => {
    if (loading) return; // a slow API: one load at a time
    loading = true;
    try {
      const [clusters, capacity] = await Promise.all([get('/api/clusters', signal), capacityOf(signal)]);
      if (signal.aborted) return;
      rows = clusters.map((c) => rowOf(c, liveCounts(c), capacity.get(c.name)));
      err.textContent = '';
      render();
    } catch (e) {
      if (!signal.aborted) err.textContent = 'Could not load the clusters: ' + e.message;
    } finally {
      loading = false;
    }
  };
  render();
  load();
  const every = setInterval(tick, 1000);
  const reload = setInterval(load, RELOAD_MS);
  signal.addEventListener('abort', () => { clearInterval(every); clearInterval(reload); });
}

// viewFrom reads the sort and filter from the URL's query; an unknown
// column or direction is the default (by name, ascending).
function viewFrom(query) {
  const sort = query.get('sort');
  return {
    sort: COLUMNS.some((col) => col.key === sort) ? sort : 'name',
    dir: query.get('dir') === 'desc' ? 'desc' : 'asc',
    q: query.get('q') || '',
  };
}

// saveView puts the view in the URL in place: no history entry a keystroke,
// and no hashchange (which would build the page again).
function saveView(view) {
  const q = new URLSearchParams();
  if (view.sort !== 'name' || view.dir !== 'asc') { q.set('sort', view.sort); q.set('dir', view.dir); }
  if (view.q) q.set('q', view.q);
  const s = q.toString();
  history.replaceState(history.state, '', '#/clusters' + (s ? '?' + s : ''));
}

function markSort(thead, caption, view) {
  for (const th of thead.querySelectorAll('th')) {
    const on = th.dataset.col === view.sort;
    if (on) th.setAttribute('aria-sort', view.dir === 'desc' ? 'descending' : 'ascending');
    else th.removeAttribute('aria-sort');
    th.querySelector('.arrow').textContent = on ? (view.dir === 'desc' ? ' ▼' : ' ▲') : '';
  }
  const col = COLUMNS.find((c) => c.key === view.sort);
  caption.textContent = 'Clusters, sorted by ' + col.label.toLowerCase() + (view.dir === 'desc' ? ', descending' : ', ascending');
}

function matches(r, q) {
  const needle = q.trim().toLowerCase();
  return !needle || r.c.name.toLowerCase().includes(needle) || (r.c.server || '').toLowerCase().includes(needle);
}

// ordered sorts on the view's column, then by name (ascending either way)
// so that equal values keep one order across reloads.
function ordered(rows, view) {
  const col = COLUMNS.find((c) => c.key === view.sort);
  const sign = view.dir === 'desc' ? -1 : 1;
  const cmp = (x, y) => (typeof x === 'number' && typeof y === 'number' ? x - y : collator.compare(String(x), String(y)));
  return rows.slice().sort((a, b) => {
    const x = col.sort(a), y = col.sort(b);
    if (x !== y) {
      if (x === null || x === undefined) return 1;
      if (y === null || y === undefined) return -1;
      const d = cmp(x, y);
      if (d) return sign * d;
    }
    return collator.compare(a.c.name, b.c.name);
  });
}

// rowOf is a cluster with what its columns sort on worked out once a load.
function rowOf(c, counts, capacity) {
  const hl = c.health || {};
  const checked = Date.parse(hl.checked_at);
  const expiry = hl.token_expiry ? Date.parse(hl.token_expiry) : NaN;
  let health = 'healthy';
  if (!(checked > 0)) health = 'not checked'; // Go's zero time: no probe yet
  else if (!hl.reachable) health = 'unreachable';
  else if (!hl.credentials_valid) health = 'credentials invalid';
  return { c, hl, counts, health, checked: checked > 0 ? checked : null, expiry: Number.isFinite(expiry) ? expiry : null, gpus: gpusOf(capacity) };
}

// capacityOf reads every spoke's capacity view (GET /api/capacity) by name;
// a failure leaves the column unknown rather than the page unusable.
async function capacityOf(signal) {
  try {
    return new Map((await get('/api/capacity', signal)).map((c) => [c.cluster, c]));
  } catch {
    return new Map();
  }
}

// gpusOf is a spoke's GPUs free and in all, summed over its products; free
// is null where nothing is known (no capacity view, or not synced yet).
function gpusOf(c) {
  if (!c || !c.view) return { free: null, text: 'no view' };
  if (!c.synced) return { free: null, text: 'syncing' };
  let free = 0, total = 0;
  for (const g of c.gpus || []) { free += g.free; total += g.total; }
  return { free, text: total ? free + ' of ' + total : 'none' };
}

function gpusCell(r) {
  return h('td', { class: r.gpus.free === null ? 'num muted' : 'num', 'data-testid': 'gpus-free', text: r.gpus.text });
}

// liveCounts is a cluster's live pods by state as the server counted them,
// or why they are unknown (the store could not count).
function liveCounts(c) {
  if (!c.live) return { error: 'not counted: the store did not answer' };
  return { n: Object.fromEntries(LIVE.map((s) => [s, c.live[s] || 0])) };
}

const detailId = (name) => 'cl-detail-' + name;

function row(r, ctx) {
  return h('tr', { 'data-cluster': r.c.name }, COLUMNS.map((col) => {
    const td = col.cell(r, ctx);
    td.dataset.col = col.key;
    return td;
  }));
}

function nameCell(r, ctx) {
  const name = r.c.name;
  const button = h('button', { type: 'button', class: 'disclose', 'aria-expanded': String(ctx.open.has(name)), 'aria-controls': detailId(name),
    'data-focus': name + ':details', onclick: () => ctx.toggle(name, button) }, name);
  return h('td', {}, button, r.c.default ? [' ', h('span', { class: 'pill muted', text: 'default' })] : null);
}

// ownerCell names the replica running the cluster's loops (sharded
// replicas; its host part, the whole Lease identity on hover) and says when
// a cluster removed from the profile is draining.
function ownerCell(r) {
  const owner = r.c.owner || '';
  const host = owner.includes('_') ? owner.slice(0, owner.lastIndexOf('_')) : owner;
  return h('td', { class: 'mono', title: owner },
    host || h('span', { class: 'muted', text: '—' }),
    r.c.draining ? [' ', h('span', { class: 'pill bad', text: 'draining' })] : null);
}

function healthCell(r) {
  const cls = { healthy: 'ok', 'not checked': 'muted' }[r.health] || 'bad';
  return h('td', {}, h('span', { class: 'pill ' + cls, 'data-testid': 'health', text: r.health }));
}

function countdown(r, ctx, attrs) {
  const el = h('span', { class: 'countdown', ...attrs });
  ctx.countdowns.push([el, r.expiry]);
  return el;
}

function expiryCell(r, ctx) {
  if (r.expiry === null) return h('td', { class: 'muted', text: 'unknown' });
  return h('td', { class: 'num' }, countdown(r, ctx, { 'data-testid': 'token-countdown' }));
}

// countCell links to the cluster's pods in that state.
function countCell(r, state) {
  if (!r.counts.n) return h('td', { class: 'num muted', text: '—' });
  const q = new URLSearchParams({ cluster: r.c.name, state });
  return h('td', { class: 'num' }, h('a', { href: '#/pods?' + q, 'data-focus': r.c.name + ':' + state,
    text: String(r.counts.n[state]) }));
}

function yesNo(v) { return h('span', { class: v ? 'ok' : 'bad', text: v ? 'yes' : 'no' }); }

// detailRow is what a cluster's card showed, under its row while open.
function detailRow(r, ctx) {
  const { c, hl, counts } = r;
  let expiry = h('span', { class: 'muted', text: 'unknown' });
  if (r.expiry !== null) expiry = h('span', {}, countdown(r, ctx), h('span', { class: 'muted', text: ' (' + fmtTime(hl.token_expiry) + ')' }));
  const pods = counts.error ? h('span', { class: 'bad', text: counts.error })
    : LIVE.map((s, i) => [i ? ', ' : '', h('span', { class: 'state-' + s, text: s }), ' ' + counts.n[s]]);
  return h('tr', { class: 'cl-detail', id: detailId(c.name), 'data-detail': c.name, hidden: !ctx.open.has(c.name) },
    h('td', { colspan: COLUMNS.length }, h('dl', { class: 'kv' },
      h('dt', { text: 'API server' }), h('dd', { class: 'mono', text: c.server }),
      h('dt', { text: 'Loop namespace' }), h('dd', { class: 'mono', text: c.loop_namespace || '—' }),
      h('dt', { text: 'Default cluster' }), h('dd', { text: c.default ? 'yes' : 'no' }),
      h('dt', { text: 'Reachable' }), h('dd', {}, yesNo(hl.reachable)),
      h('dt', { text: 'Credentials valid' }), h('dd', {}, yesNo(hl.credentials_valid)),
      h('dt', { text: 'Token expires' }), h('dd', {}, expiry),
      h('dt', { text: 'Last error' }), h('dd', { class: hl.last_error ? 'bad' : 'muted', text: hl.last_error ? hl.last_error + ' (at ' + fmtTime(hl.checked_at) + ')' : 'none' }),
      h('dt', { text: 'Checked' }), h('dd', { text: r.checked ? fmtTime(hl.checked_at) : 'not yet' }),
      h('dt', { text: 'Live pods' }), h('dd', { 'data-testid': 'live-pods' }, pods),
      h('dt', { text: 'Pods' }), h('dd', {}, h('a', { href: '#/pods?cluster=' + encodeURIComponent(c.name), 'data-focus': c.name + ':pods', text: 'list ' + c.name + "'s pods" })))));
}

function emptyRow(total, q) {
  const text = total ? 'No cluster’s name or server contains “' + q.trim() + '”.' : 'The controller has no clusters.';
  return h('tr', { class: 'empty' }, h('td', { colspan: COLUMNS.length, class: 'muted', text }));
}

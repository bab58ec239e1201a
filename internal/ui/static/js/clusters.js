// Clusters: each spoke's health from GET /api/clusters (probed by the
// controller), its token's expiry counting down, and how many pods it runs
// by live state (GET /api/pods?state=pending,dispatched,running, one page).
import { get, request } from './api.js';
import { h, replace, fmtTime, fmtDuration } from './dom.js';

const LIVE = ['pending', 'dispatched', 'running'];
const COUNT_LIMIT = 500;

export function clustersPage(main, _params, signal) {
  const grid = h('div', { class: 'cards', id: 'clusters' });
  const err = h('p', { class: 'error', id: 'clusters-error' });
  replace(main, h('h1', { text: 'Clusters' }), err, grid);
  const countdowns = [];
  const tick = () => {
    for (const [el, exp] of countdowns) {
      const left = exp - Date.now();
      el.textContent = left > 0 ? 'in ' + fmtDuration(left) : 'expired ' + fmtDuration(-left) + ' ago';
      el.className = left > 60000 ? 'ok' : 'bad';
    }
  };
  const load = async () => {
    try {
      const clusters = await get('/api/clusters', signal);
      const counts = await Promise.all(clusters.map((c) => liveCounts(c.name, signal)));
      countdowns.length = 0;
      replace(grid, ...clusters.map((c, i) => card(c, counts[i], countdowns)));
      err.textContent = '';
      tick();
    } catch (e) {
      if (!signal.aborted) err.textContent = 'Could not load the clusters: ' + e.message;
    }
  };
  load();
  const every = setInterval(tick, 1000);
  const reload = setInterval(load, 10000);
  signal.addEventListener('abort', () => { clearInterval(every); clearInterval(reload); });
}

// liveCounts counts a cluster's live pods by state; more than one page is
// shown as "N+".
async function liveCounts(cluster, signal) {
  try {
    const q = new URLSearchParams({ cluster, state: LIVE.join(','), limit: String(COUNT_LIMIT) });
    const { body, headers } = await request('GET', '/api/pods?' + q, undefined, signal);
    const n = Object.fromEntries(LIVE.map((s) => [s, 0]));
    for (const p of body) n[p.state] = (n[p.state] || 0) + 1;
    return { n, more: Boolean(headers.get('Crucible-Continue')) };
  } catch (e) {
    return { error: e.message };
  }
}

function yesNo(v) { return h('span', { class: v ? 'ok' : 'bad', text: v ? 'yes' : 'no' }); }

function card(c, counts, countdowns) {
  const hl = c.health || {};
  const healthy = hl.reachable && hl.credentials_valid;
  let expiry = h('span', { class: 'muted', text: 'unknown' });
  if (hl.token_expiry) {
    const left = h('span', { class: 'countdown', 'data-testid': 'token-countdown' });
    countdowns.push([left, new Date(hl.token_expiry).getTime()]);
    expiry = h('span', {}, left, h('span', { class: 'muted', text: ' (' + fmtTime(hl.token_expiry) + ')' }));
  }
  let podCounts;
  if (counts.error) podCounts = h('span', { class: 'muted', text: counts.error });
  else {
    podCounts = h('span', {}, LIVE.map((s, i) => [i ? ', ' : '', h('span', { class: 'state-' + s, text: s }), ' ' + counts.n[s] + (counts.more ? '+' : '')]));
  }
  return h('section', { class: 'card', 'data-cluster': c.name, 'aria-labelledby': 'cl-' + c.name },
    h('h2', { id: 'cl-' + c.name }, c.name, ' ', h('span', { class: 'pill ' + (healthy ? 'ok' : 'bad'), 'data-testid': 'health', text: healthy ? 'healthy' : 'unhealthy' }),
      c.default ? h('span', { class: 'pill muted', text: 'default' }) : null),
    h('dl', { class: 'kv' },
      h('dt', { text: 'API server' }), h('dd', { class: 'mono', text: c.server }),
      h('dt', { text: 'Reachable' }), h('dd', {}, yesNo(hl.reachable)),
      h('dt', { text: 'Credentials valid' }), h('dd', {}, yesNo(hl.credentials_valid)),
      h('dt', { text: 'Token expires' }), h('dd', {}, expiry),
      h('dt', { text: 'Last error' }), h('dd', { class: hl.last_error ? 'bad' : 'muted', text: hl.last_error ? hl.last_error + ' (at ' + fmtTime(hl.checked_at) + ')' : 'none' }),
      h('dt', { text: 'Checked' }), h('dd', { text: fmtTime(hl.checked_at) }),
      h('dt', { text: 'Live pods' }), h('dd', { 'data-testid': 'live-pods' }, podCounts),
      h('dt', { text: 'Pods' }), h('dd', {}, h('a', { href: '#/pods?cluster=' + encodeURIComponent(c.name), text: 'list ' + c.name + "'s pods" }))));
}

// Capacity: per spoke and GPU product a bar of the GPUs in use and free
// now (GET /api/capacity), and below, per spoke, its GPUs in use over the
// last hour (GET /api/capacity/history, sampled by the controller every
// 30 s). The figures are always in text beside the drawing: a bar's colour
// and a line's shape repeat them, never replace them. Reloaded every 10 s,
// as the Clusters page is.
import { get } from './api.js';
import { h, replace, fmtTime } from './dom.js';

const RELOAD_MS = 10000;
const HOUR_MS = 3600 * 1000;
// GAP_MS breaks the line where samples are missing (the controller
// restarted, or the view was syncing): three sampling intervals.
const GAP_MS = 90 * 1000;
const SVG = 'http://www.w3.org/2000/svg';
// The chart's drawing box, in SVG units; it scales with the page's width.
const W = 600, H = 100;

export function capacityPage(main, _params, signal) {
  const err = h('p', { class: 'error', id: 'capacity-error' });
  const now = h('div', { id: 'cap-now' });
  const hist = h('div', { id: 'cap-history' });
  // The sections appear with the first answer, below what was there: a
  // heading placed early would only move down as the bars arrive.
  const body = h('div', { 'aria-busy': 'true' }, h('p', { class: 'muted', text: 'Loading…' }));
  replace(main, h('h1', { text: 'Capacity' }), err, body);

  let loading = false;
  const load = async () => {
    if (loading) return; // a slow API: one load at a time
    loading = true;
    try {
      const [capacity, history] = await Promise.all([get('/api/capacity', signal), get('/api/capacity/history', signal)]);
      if (signal.aborted) return;
      const byName = new Map(history.map((c) => [c.cluster, c]));
      replace(now, capacity.map(nowSection));
      replace(hist, capacity.map((c) => historySection(c, byName.get(c.cluster), Date.now())));
      if (!now.isConnected) {
        body.removeAttribute('aria-busy');
        replace(body, h('h2', { text: 'GPUs now' }), now, h('h2', { text: 'GPUs in use, last hour' }), hist);
      }
      err.textContent = '';
    } catch (e) {
      if (!signal.aborted) err.textContent = 'Could not load the capacity: ' + e.message;
    } finally {
      loading = false;
    }
  };
  load();
  const reload = setInterval(load, RELOAD_MS);
  signal.addEventListener('abort', () => clearInterval(reload));
}

// status is why a spoke has no figures, or '' when it has them.
function status(c) {
  if (!c.view) return 'no capacity view (capacity = true in its profile entry)';
  if (!c.synced) return 'syncing: its view is still listing the nodes and pods';
  return '';
}

// nowSection is a spoke's bars, one a GPU product.
function nowSection(c) {
  const why = status(c);
  const gpus = c.gpus || [];
  let body;
  if (why) body = h('p', { class: 'muted', 'data-testid': 'cap-status', text: why });
  else if (!gpus.length) body = h('p', { class: 'muted', 'data-testid': 'cap-status', text: 'no GPUs' });
  else body = h('ul', { class: 'capbars' }, gpus.map((g) => bar(c.cluster, g)));
  return h('section', { class: 'capspoke', 'data-cluster': c.cluster, 'aria-label': c.cluster },
    h('h3', { text: c.cluster }), body);
}

// bar is one product's GPUs: the text says it all; the drawing, hidden
// from screen readers, shows it at a glance.
function bar(cluster, g) {
  const used = g.total - g.free;
  const pct = g.total ? (100 * used) / g.total : 0;
  const text = used + ' used, ' + g.free + ' free of ' + g.total;
  return h('li', { class: 'capbar', 'data-product': g.product },
    h('span', { class: 'capname mono', text: g.product || '(no product label)' }),
    svg('svg', { class: 'bar', viewBox: '0 0 100 10', preserveAspectRatio: 'none', 'aria-hidden': 'true', focusable: 'false' },
      svg('rect', { class: 'free', x: 0, y: 0, width: 100, height: 10 }),
      svg('rect', { class: 'used', x: 0, y: 0, width: pct.toFixed(2), height: 10 })),
    h('span', { class: 'capnum', 'data-testid': 'gpu-bar', 'data-cluster': cluster, text }));
}

// historySection is a spoke's line: GPUs in use (all products summed)
// over the last hour, scaled to the most GPUs it had; its figcaption and
// the SVG's label are the text alternative.
function historySection(c, hc, nowMs) {
  const head = h('h3', { text: c.cluster });
  const why = status(c);
  const points = summed(hc && hc.gpus);
  if (why || !points.length) {
    const text = why || (c.gpus && c.gpus.length ? 'no samples yet' : 'no GPUs');
    return h('section', { class: 'caphist', 'data-cluster': c.cluster, 'aria-label': c.cluster + ', last hour' }, head,
      h('p', { class: 'muted', 'data-testid': 'history-status', text }));
  }
  const top = Math.max(1, ...points.map((p) => p.total));
  const x = (t) => Math.max(0, Math.min(W, (W * (t - (nowMs - HOUR_MS))) / HOUR_MS));
  const y = (v) => H - (H * v) / top;
  const lines = segments(points).map((seg) => svg('polyline', { class: 'occ',
    points: seg.map((p) => x(p.t).toFixed(1) + ',' + y(p.used).toFixed(1)).join(' ') }));
  const last = points[points.length - 1];
  const desc = describe(c.cluster, points);
  const descId = 'cap-desc-' + c.cluster;
  const chart = svg('svg', { class: 'chart', viewBox: '0 0 ' + W + ' ' + H, role: 'img', 'aria-labelledby': descId,
    'data-testid': 'occupancy', 'data-cluster': c.cluster, 'data-samples': points.length },
  svg('line', { class: 'axis', x1: 0, y1: H, x2: W, y2: H }),
  svg('line', { class: 'axis top', x1: 0, y1: 0, x2: W, y2: 0 }),
  lines,
  svg('circle', { class: 'occ', cx: x(last.t).toFixed(1), cy: y(last.used).toFixed(1), r: 3 }));
  return h('section', { class: 'caphist', 'data-cluster': c.cluster, 'aria-label': c.cluster + ', last hour' }, head,
    h('figure', { class: 'chartbox' },
      h('div', { class: 'yaxis', 'aria-hidden': 'true' }, h('span', { text: String(top) }), h('span', { text: '0' })),
      chart,
      h('div', { class: 'xaxis', 'aria-hidden': 'true' }, h('span', { text: '60 min ago' }), h('span', { text: 'now' })),
      h('figcaption', { id: descId, text: desc })));
}

// summed is a spoke's samples with its products added up, by time
// (the controller samples every product of a spoke at once).
function summed(series) {
  const at = new Map();
  for (const s of series || []) {
    for (const p of s.samples) {
      const t = Date.parse(p.time);
      const e = at.get(t) || { t, used: 0, total: 0 };
      e.used += p.used;
      e.total += p.total;
      at.set(t, e);
    }
  }
  return [...at.values()].sort((a, b) => a.t - b.t);
}

// segments splits points where samples are missing.
function segments(points) {
  const out = [];
  let cur = [];
  for (const p of points) {
    if (cur.length && p.t - cur[cur.length - 1].t > GAP_MS) { out.push(cur); cur = []; }
    cur.push(p);
  }
  if (cur.length) out.push(cur);
  // A lone point draws no line: a flat stub, so that it shows.
  return out.map((seg) => (seg.length === 1 ? [seg[0], { ...seg[0], t: seg[0].t + GAP_MS / 3 }] : seg));
}

// describe says what the line shows, for those who cannot see it.
function describe(cluster, points) {
  const last = points[points.length - 1];
  const used = points.map((p) => p.used);
  return cluster + ': ' + last.used + ' of ' + last.total + ' GPUs in use at ' + fmtTime(new Date(last.t).toISOString()) +
    '; over the last hour between ' + Math.min(...used) + ' and ' + Math.max(...used) + ' in use (' +
    points.length + (points.length === 1 ? ' sample' : ' samples') + ', since ' + fmtTime(new Date(points[0].t).toISOString()) + ').';
}

// svg makes an SVG element; attrs are attributes, children nodes.
function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const c of children.flat(Infinity)) if (c) el.append(c);
  return el;
}

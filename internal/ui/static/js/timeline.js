// Why a pod waits and what happened to it: the waiting badge of the pod
// list and the pod's head, and the pod page's history with the wait
// between each entry and the one before — where a pod spent its time.
// Reasons and messages come from the spoke (a work pod can shape some of
// them), so they are only ever text.
import { h, replace, fmtTime, fmtDuration, stateCell } from './dom.js';

// waitBadge is "waiting: Unschedulable", the message as its tooltip.
export function waitBadge(w) {
  return h('span', { class: 'pill waiting', 'data-testid': 'waiting', title: w.message || '', text: 'waiting: ' + w.reason });
}

// waitingText is a wait's reason and message on one line.
export function waitingText(w) { return detail(w.reason, w.message); }

function detail(reason, message) {
  const m = (message || '').split(/\s+/).filter(Boolean).join(' ');
  return [reason, m].filter(Boolean).join(' — ');
}

// fmtWait is the time from one entry to the next: "+17ms", "+2.3s", "+1m 05s".
export function fmtWait(ms) {
  if (!Number.isFinite(ms)) return '';
  if (ms < 1000) return '+' + Math.max(0, Math.round(ms)) + 'ms';
  if (ms < 10000) return '+' + (ms / 1000).toFixed(1) + 's';
  return '+' + fmtDuration(ms);
}

// entryWhat names an entry as `crucible pods get` does: a state change by
// its state, anything else by its event.
function entryWhat(e) { return e.event === 'state' ? stateCell(e.state) : h('span', { class: 'event', text: e.event }); }

function entryDetail(e) { return e.event === 'scheduled' && e.message ? 'on ' + e.message : detail(e.reason, e.message); }

// Timeline is the history's table in a viewport of fixed height, so that
// entries arriving never move what follows; it keeps the newest in view
// unless the reader scrolled up.
export class Timeline {
  constructor() {
    this.rows = h('tbody', { id: 'history-rows' });
    this.note = h('p', { class: 'muted', id: 'history-note', text: '…' });
    this.el = h('div', { class: 'history', id: 'history', tabindex: '0', role: 'region', 'aria-labelledby': 'h-history' },
      h('table', {},
        h('caption', { class: 'sr-only', text: 'The pod\'s history, oldest first, with the wait since the entry before' }),
        h('colgroup', {}, [0, 1, 2, 3].map((i) => h('col', { class: 'hc' + i }))),
        h('thead', {}, h('tr', {}, ['Time', 'What', 'Detail', 'Wait'].map((t) => h('th', { scope: 'col', text: t })))),
        this.rows),
      this.note);
    this.shown = false;
  }

  show(history) {
    const list = history || [];
    const atEnd = this.el.scrollTop + this.el.clientHeight >= this.el.scrollHeight - 2;
    replace(this.rows, list.map((e, i) => h('tr', { 'data-event': e.event },
      h('td', { class: 'num', title: e.at, text: fmtTime(e.at) }), h('td', {}, entryWhat(e)),
      h('td', { class: 'detail', text: entryDetail(e) }),
      h('td', { class: 'num', text: i ? fmtWait(new Date(e.at) - new Date(list[i - 1].at)) : '' }))));
    this.note.textContent = 'No history yet.';
    this.note.hidden = list.length > 0;
    if (!this.shown || atEnd) this.el.scrollTop = this.el.scrollHeight;
    this.shown = true;
  }
}

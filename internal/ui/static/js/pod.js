// Pod: what it runs (env and file names only, never values), where, why it
// waits while it does, its times and end, whether run-live is available and
// the command for it, its history, its artifacts with download, and its log
// live as it grows.
import { get, request, stream, download } from './api.js';
import { h, replace, fmtTime, fmtBytes, stateCell, toast } from './dom.js';
import { may } from './session.js';
import { LogView } from './logview.js';
import { Timeline, waitBadge, waitingText } from './timeline.js';

const LIVE = new Set(['pending', 'dispatched', 'running']);

// DETAIL_LABELS are the rows of a pod's details, in order (showDetails).
const DETAIL_LABELS = ['State', 'Exit code', 'Reason', 'Waiting', 'Cluster', 'Node', 'Namespace', 'Kind', 'Image', 'Command', 'Env (names)',
  'Files', 'Secret files', 'Submitter', 'Created', 'Last change', 'Finished', 'Log collected', 'Run-live'];

export function podPage(main, [id], signal) {
  const head = h('div', { class: 'pod-head' });
  const details = h('dl', { class: 'kv', id: 'pod-details' });
  const err = h('p', { class: 'error', id: 'pod-error', role: 'alert' });
  const artBody = h('tbody', { id: 'artifact-rows' });
  const artNote = h('p', { class: 'muted', id: 'artifacts-note' });
  const log = new LogView(), history = new Timeline();
  const logNote = h('p', { class: 'muted', id: 'log-note' });
  const dialog = confirmDialog(id, signal, () => refresh());
  // Kept across refreshes, so the details do not flicker while it is asked again.
  const runLive = h('span', { id: 'pod-run-live', class: 'muted', text: '…' });
  replace(main, h('h1', {}, 'Pod ', h('span', { class: 'mono', text: id })), head, err,
    h('div', { class: 'grid2' },
      h('section', { 'aria-labelledby': 'h-details' }, h('h2', { id: 'h-details', text: 'Details' }), details),
      h('section', { 'aria-labelledby': 'h-arts' }, h('h2', { id: 'h-arts', text: 'Artifacts' }),
        h('table', {}, h('colgroup', {}, [0, 1, 2, 3].map((i) => h('col', { class: 'ac' + i }))),
          h('thead', {}, h('tr', {}, ['Kind', 'Size', 'SHA-256', ''].map((t) => h('th', { scope: 'col', text: t })))), artBody), artNote)),
    h('section', { 'aria-labelledby': 'h-history' }, h('h2', { id: 'h-history', text: 'History' }), history.el),
    h('section', { 'aria-labelledby': 'h-log' }, h('h2', { id: 'h-log', text: 'Log' }), logNote, log.bar(), log.el),
    dialog.el);

  // Until the pod is read, the head and details hold their place (the same
  // rows, values pending), so filling them in does not push the log down:
  // on a slow answer that jump was a layout shift of 0.3.
  replace(head, h('p', { text: '\u00a0' }));
  replace(details, ...DETAIL_LABELS.flatMap((k) => [h('dt', { text: k }), h('dd', { class: 'muted', text: '…' })]));

  let pod = null, logStarted = false, asked = 0;

  // refresh reads the pod and shows it. Answers can arrive out of order
  // (one change's read overtaking the one before), so only the newest
  // question's answer is shown: an older one would undo what it showed.
  async function refresh() {
    const n = ++asked;
    let got;
    try {
      got = await get('/api/pods/' + id, signal);
    } catch (e) {
      if (!signal.aborted && n === asked) err.textContent = e.message;
      return;
    }
    if (n !== asked) return;
    pod = got;
    err.textContent = '';
    showHead(head, pod, dialog);
    showDetails(details, pod, runLive);
    history.show(pod.history);
    loadArtifacts();
    loadRunLive();
    if (!logStarted) startLog();
  }

  async function loadArtifacts() {
    if (!may('artifacts', pod.cluster)) { artNote.textContent = 'You may not read this pod\'s artifacts.'; return; }
    try {
      const arts = await get('/api/pods/' + id + '/artifacts', signal);
      replace(artBody, ...arts.map((a) => h('tr', { 'data-artifact': a.Kind },
        h('td', { class: 'mono', text: a.Kind }), h('td', { class: 'num', title: a.Size + ' bytes', text: fmtBytes(a.Size) }),
        h('td', { class: 'mono', title: a.SHA256, text: a.SHA256 }),
        h('td', {}, h('button', { type: 'button', 'data-download': a.Kind, text: 'Download', 'aria-label': 'Download ' + a.Kind,
          onclick: () => download('/api/pods/' + id + '/artifacts/' + encodeURIComponent(a.Kind), id + '-' + a.Kind).catch((e) => toast(e.message)) })))));
      artNote.textContent = arts.length ? '' : 'No artifacts yet.';
    } catch (e) {
      if (!signal.aborted) artNote.textContent = e.message;
    }
  }

  // Run-live is a port-forward from the user's machine (a browser cannot
  // send the API's credentials on a WebSocket): the page says whether it
  // is available and which command to run.
  async function loadRunLive() {
    let rl;
    try {
      rl = await get('/api/pods/' + id + '/run-live', signal);
    } catch (e) {
      if (!signal.aborted) { runLive.className = 'muted'; runLive.textContent = e.message; }
      return;
    }
    runLive.className = rl.available ? '' : 'muted';
    const cmd = h('code', { class: 'mono', id: 'run-live-command', text: rl.command || '' });
    if (rl.available) replace(runLive, 'available on port ' + rl.port + ': ', cmd);
    else if (rl.enabled && rl.allowed && LIVE.has(pod.state)) replace(runLive, 'available once the pod runs: ', cmd);
    else replace(runLive, 'not available: ' + rl.reason);
  }

  function startLog() {
    logStarted = true;
    if (!may('log', pod.cluster)) { logNote.textContent = 'You may not read this pod\'s log.'; return; }
    logNote.textContent = LIVE.has(pod.state) ? 'Following the live log.' : 'The stored log.';
    stream('/api/pods/' + id + '/logs', {
      signal,
      onStatus: (s) => { if (s) logNote.textContent = s; },
      onEvent: (name, data, eventId) => {
        if (name === 'line' && data) log.add({ n: Number(eventId) || log.lines.length + 1, text: data.text });
        else if (name === 'end') { logNote.textContent = 'The log is complete.'; refresh(); return 'stop'; }
        return undefined;
      },
    });
  }

  // State changes of this pod, live. The pod is read once the stream is
  // open (and again on every reconnect): read before, a change between the
  // read and the subscription would never reach the page — the scheduler's
  // first "Unschedulable" is such a change, and no later one repeats it.
  // A stream that cannot open at all still leaves the pod read once.
  const poll = setInterval(() => { if (pod && LIVE.has(pod.state)) loadArtifacts(); }, 5000);
  signal.addEventListener('abort', () => clearInterval(poll));
  stream('/api/events', {
    signal,
    onOpen: () => refresh(),
    onStatus: (s) => { if (s && !asked) refresh(); },
    onEvent: (name, p) => { if ((name === 'pod' && p && p.id === id) || name === 'reset') refresh(); },
  });
}

function showHead(head, p, dialog) {
  const parts = [h('span', { id: 'pod-state' }, stateCell(p.state))];
  if (p.exit_code !== undefined && p.exit_code !== null) parts.push(' exit code ', h('strong', { id: 'pod-exit', text: p.exit_code }));
  if (p.reason) parts.push(' — ', h('span', { id: 'pod-reason', text: p.reason }));
  if (p.waiting) parts.push(' ', waitBadge(p.waiting));
  if (LIVE.has(p.state) && may('delete', p.cluster)) {
    parts.push(' ', h('button', { type: 'button', class: 'danger', id: 'cancel', text: 'Cancel pod…', onclick: () => dialog.open() }));
  }
  replace(head, h('p', {}, ...parts));
}

function showDetails(details, p, runLive) {
  const list = (xs) => (xs && xs.length ? xs.join(', ') : '—');
  const argv = [...(p.command || []), ...(p.args || [])];
  const waiting = p.waiting ? [h('span', { id: 'pod-waiting', text: waitingText(p.waiting) }),
    h('span', { class: 'muted', text: ' (since ' + fmtTime(p.waiting.since) + ')' })] : '—';
  const rows = [
    ['State', stateCell(p.state)], ['Exit code', p.exit_code ?? '—'], ['Reason', p.reason || '—'], ['Waiting', waiting],
    ['Cluster', p.cluster], ['Node', h('span', { class: 'mono', id: 'pod-node', text: p.node || '—' })], ['Namespace', p.namespace], ['Kind', p.kind],
    ['Image', h('span', { class: 'mono', text: p.image || '—' })],
    ['Command', h('span', { class: 'mono', text: argv.length ? JSON.stringify(argv) : '(the image\'s)' })],
    ['Env (names)', list(p.env_names)], ['Files', list(p.file_names)], ['Secret files', list(p.secret_file_names)],
    ['Submitter', p.submitter || '—'], ['Created', fmtTime(p.created_at)], ['Last change', fmtTime(p.updated_at)],
    ['Finished', fmtTime(p.finished_at)], ['Log collected', p.log_collected ? 'yes' : 'no'], ['Run-live', runLive],
  ];
  replace(details, ...rows.flatMap(([k, v]) => [h('dt', { text: k }), h('dd', {}, v)]));
}

// confirmDialog asks before cancelling; Escape or "Keep running" closes it.
function confirmDialog(id, signal, done) {
  const msg = h('p', { class: 'error', id: 'cancel-error' });
  const el = h('dialog', { id: 'cancel-dialog', 'aria-labelledby': 'cancel-title' },
    h('h2', { id: 'cancel-title', text: 'Cancel ' + id + '?' }),
    h('p', { text: 'The pod is deleted on its cluster and marked cancelled. This cannot be undone.' }), msg,
    h('div', { class: 'actions' },
      h('button', { type: 'button', id: 'cancel-keep', text: 'Keep running', onclick: () => el.close() }),
      h('button', { type: 'button', class: 'danger', id: 'cancel-confirm', text: 'Cancel pod', onclick: async () => {
        try {
          await request('POST', '/api/pods/' + id + '/cancel', {}, signal);
          el.close();
          toast(id + ' cancelled');
          done();
        } catch (e) { msg.textContent = e.message; }
      } })));
  return { el, open: () => { msg.textContent = ''; el.showModal(); el.querySelector('#cancel-keep').focus(); } };
}

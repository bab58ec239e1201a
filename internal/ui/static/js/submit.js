// Submit: a form for POST /api/pods — image, command, env, files, cluster,
// and the pod class with the asks it allows. Shown only to callers who may
// create on some cluster.
import { request } from './api.js';
import { h, replace } from './dom.js';
import { may, whoami } from './session.js';
import { ClassPicker } from './classpick.js';

const MAX_FILE_BYTES = 1 << 20;

export function submitPage(main, _params, signal) {
  const clusters = Object.keys((whoami() && whoami().clusters) || {}).sort().filter((c) => may('create', c));
  if (!clusters.length) {
    replace(main, h('h1', { text: 'Submit' }), h('p', { text: 'You may not submit work pods to any cluster.' }));
    return;
  }
  const field = (id, label, input, hint) => h('div', {}, h('label', { for: id }, label, hint ? h('span', { class: 'hint', text: ' — ' + hint }) : null), input);
  const cluster = h('select', { id: 's-cluster', name: 'cluster' }, clusters.map((c) => h('option', { value: c, text: c })));
  const kind = h('select', { id: 's-kind', name: 'kind' }, h('option', { value: 'turn', text: 'turn' }), h('option', { value: 'loop', text: 'loop' }));
  const image = h('input', { type: 'text', id: 's-image', name: 'image', required: true, autocomplete: 'off', spellcheck: false });
  const command = h('textarea', { id: 's-command', name: 'command', rows: 4, spellcheck: false });
  const env = h('textarea', { id: 's-env', name: 'env', rows: 3, spellcheck: false });
  const files = h('div', { id: 's-files' });
  const err = h('p', { class: 'error', id: 'submit-error', role: 'alert' });
  const go = h('button', { class: 'primary', type: 'submit', id: 's-go', text: 'Submit' });
  const classes = new ClassPicker(signal);
  const follow = () => classes.set(cluster.value, kind.value);
  for (const el of [cluster, kind]) el.addEventListener('change', follow);
  let nfile = 0;
  let key = '', keyFor = null; // the Idempotency-Key and the request it was made for
  const addFile = () => {
    const i = nfile++;
    const name = h('input', { type: 'text', id: 's-file-name-' + i, 'aria-label': 'File name ' + (i + 1), placeholder: 'name (e.g. task.json)', 'data-file-name': '' });
    const pick = h('input', { type: 'file', id: 's-file-' + i, 'aria-label': 'File ' + (i + 1) + ' content', 'data-file': '' });
    pick.addEventListener('change', () => { if (!name.value && pick.files[0]) name.value = pick.files[0].name; });
    files.append(h('div', { class: 'filerow' }, name, pick));
  };
  addFile();

  const form = h('form', { class: 'submit', id: 'submit-form', novalidate: true, onsubmit: async (ev) => {
    ev.preventDefault();
    err.textContent = '';
    clearFieldErrors(form);
    let body;
    try { body = await build({ cluster, kind, image, command, env, files, classes }); } catch (e) { showError(form, err, e); return; }
    go.disabled = true;
    // The same form sent again after no answer (or a 503/504) carries the
    // same Idempotency-Key: if the first one reached the controller, the
    // answer is that work pod, not a second one.
    const sent = JSON.stringify(body);
    if (sent !== keyFor) { key = newKey(); keyFor = sent; }
    try {
      const { body: wp } = await request('POST', '/api/pods', body, signal, { 'Idempotency-Key': key });
      keyFor = null;
      location.hash = '#/pods/' + wp.id;
    } catch (e) {
      if (e.status !== 503 && e.status !== 504 && e.status !== undefined) keyFor = null; // an answer: a new try is new work
      showError(form, err, e);
    } finally { go.disabled = false; }
  } },
  h('div', { class: 'grid2' },
    h('div', {},
      field('s-cluster', 'Cluster', cluster),
      field('s-kind', 'Kind', kind),
      field('s-image', 'Image', image, 'required'),
      field('s-command', 'Command', command, 'one argument per line; empty: the image\'s')),
    h('div', {},
      field('s-env', 'Environment', env, 'NAME=value, one per line'),
      h('div', {}, h('p', { class: 'label-like' }, h('strong', { text: 'Files' }), h('span', { class: 'hint', text: ' — mounted into the pod, up to 1 MiB each' })), files,
        h('button', { type: 'button', id: 's-add-file', text: 'Add a file', onclick: addFile })))),
  classes.el, err, h('div', { class: 'actions' }, go));
  replace(main, h('h1', { text: 'Submit a work pod' }), form);
  image.focus();
  follow();
  classes.load();
}

// build is the request the form says, the files read; a problem throws,
// naming the field when the API would name one.
async function build({ cluster, kind, image, command, env, files, classes }) {
  if (!image.value.trim()) { image.focus(); throw new Error('image: required'); }
  classes.set(cluster.value, kind.value); // a value set without a change event (a script's) still counts
  const body = { cluster: cluster.value, kind: kind.value, image: image.value.trim(), ...classes.ask() };
  const argv = command.value.split('\n').map((s) => s.replace(/\r$/, '')).filter((s) => s !== '');
  if (argv.length) body.command = argv;
  const envs = [];
  for (const [i, line] of env.value.split('\n').entries()) {
    if (!line.trim()) continue;
    const eq = line.indexOf('=');
    if (eq <= 0) { env.focus(); throw new Error(`environment line ${i + 1}: want NAME=value`); }
    envs.push({ name: line.slice(0, eq).trim(), value: line.slice(eq + 1) });
  }
  if (envs.length) body.env = envs;
  const fs = {};
  for (const row of files.querySelectorAll('.filerow')) {
    const name = row.querySelector('[data-file-name]').value.trim();
    const f = row.querySelector('[data-file]').files[0];
    if (!f) continue;
    if (!name) throw new Error('a file needs a name');
    if (f.size > MAX_FILE_BYTES) throw new Error(`file ${name}: over 1 MiB`);
    fs[name] = await f.text();
  }
  if (Object.keys(fs).length) body.files = fs;
  return body;
}

// showError shows a refusal next to the field it names when that field has
// a place for it (the class and its asks), else in the form's summary; the
// named field gets the focus either way.
function showError(form, summary, e) {
  const bad = e.field && form.querySelector(`[name="${CSS.escape(e.field)}"]`);
  const slot = bad && document.getElementById(bad.id + '-error');
  if (slot) {
    slot.textContent = e.message;
    bad.setAttribute('aria-invalid', 'true');
    summary.textContent = 'Not submitted: a field below needs a change.';
  } else summary.textContent = e.message;
  if (bad) bad.focus();
}

function clearFieldErrors(form) {
  for (const el of form.querySelectorAll('[aria-invalid]')) el.removeAttribute('aria-invalid');
  for (const el of form.querySelectorAll('.field-error')) el.textContent = '';
}

// newKey is a random Idempotency-Key (crypto.getRandomValues works outside
// secure contexts too, unlike randomUUID).
function newKey() {
  const b = crypto.getRandomValues(new Uint8Array(16));
  return 'ui-' + Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

// The submit form's pod class: a picker of the classes the chosen cluster
// offers the caller (GET /api/classes, read once per form, every cluster at
// once), each option naming its bounds, and inputs for just the asks the
// chosen class allows. An empty input asks for nothing — the class's own
// value holds, shown as its placeholder — and the kind's default class is
// not named: a form left alone sends what the API would choose anyway.
import { get } from './api.js';
import { h, replace } from './dom.js';

// FIRST are the resources shown first, in this order; others follow by name.
const FIRST = ['cpu', 'memory'];
const LABELS = { cpu: 'CPU', memory: 'Memory' };

// fieldError is a form problem at the request field the API would name.
export function fieldError(field, message) { return Object.assign(new Error(message), { field }); }

// shortDuration drops the zero units of a Go duration: "6h0m0s" is "6h".
export function shortDuration(d) { return (d || '').replace(/(\D)0s$/, '$1').replace(/(\D)0m$/, '$1'); }

function range(r) { return r.min ? `${r.min}–${r.max}` : `≤ ${r.max}`; }

function resourceNames(c) {
  const names = Object.keys((c.allow && c.allow.resources) || {});
  return [...FIRST.filter((n) => names.includes(n)), ...names.filter((n) => !FIRST.includes(n)).sort()];
}

// bounds is what a submitter may ask of class c, in one line.
export function bounds(c) {
  const parts = [];
  if (c.allow && c.allow.gpus) parts.push(`GPUs ${c.allow.gpus.min}–${c.allow.gpus.max}`);
  else if (c.gpus) parts.push(`${c.gpus} GPU${c.gpus === 1 ? '' : 's'}`);
  for (const n of resourceNames(c)) parts.push(`${n} ${range(c.allow.resources[n])}`);
  parts.push(`deadline ≤ ${shortDuration(c.max_deadline)}`);
  return parts.join(', ');
}

// shape is what a pod of class c gets when it asks for nothing.
function shape(c) {
  const list = (m) => Object.entries(m || {}).map(([k, v]) => `${k} ${v}`).join(', ');
  const parts = [];
  if (c.requests && Object.keys(c.requests).length) parts.push('requests ' + list(c.requests));
  if (c.limits && Object.keys(c.limits).length) parts.push('limits ' + list(c.limits));
  if (c.gpus) parts.push(`${c.gpus} × ${c.gpu_resource}`);
  parts.push('deadline ' + shortDuration(c.deadline));
  if (c.shm) parts.push('/dev/shm ' + c.shm);
  return 'Gets ' + parts.join('; ') + '.';
}

export class ClassPicker {
  constructor(signal) {
    this.signal = signal;
    this.byCluster = null; // cluster -> classes, once read
    this.loadError = '';
    this.cluster = null;
    this.kind = null;
    this.picked = false; // the submitter chose a class: a new kind keeps it
    this.typed = {}; // field -> what was typed, kept across classes
    this.select = h('select', { id: 's-class', name: 'class', disabled: true, 'aria-describedby': 's-class-about s-class-error' },
      h('option', { value: '', text: 'loading the classes…' }));
    this.select.addEventListener('change', () => { this.picked = true; this.renderAsks(); });
    this.about = h('p', { class: 'hint about', id: 's-class-about' });
    this.asks = h('div', { class: 'asks', id: 's-asks' });
    this.el = h('fieldset', { class: 'classes', id: 's-classes' }, h('legend', { text: 'Pod class and resources' }),
      h('div', { class: 'classrow' },
        h('div', {}, h('label', { for: 's-class', text: 'Class' }), this.select,
          h('p', { class: 'error field-error', id: 's-class-error' })),
        this.about),
      this.asks);
  }

  async load() {
    try {
      const all = await get('/api/classes', this.signal);
      this.byCluster = new Map(all.map((cc) => [cc.cluster, cc.classes]));
    } catch (e) {
      if (this.signal.aborted) return;
      this.loadError = 'The classes could not be read (' + e.message + '); the kind\'s default class is used.';
    }
    this.renderOptions();
  }

  // set follows the form's cluster and kind; a new kind brings its default
  // class unless the submitter chose one.
  set(cluster, kind) {
    if (cluster === this.cluster && kind === this.kind) return;
    const clusterChanged = cluster !== this.cluster;
    this.cluster = cluster;
    this.kind = kind;
    if (clusterChanged) this.renderOptions();
    else if (!this.picked && this.defaultName()) { this.select.value = this.defaultName(); this.renderAsks(); }
    for (const o of this.select.options) if (o.value) o.textContent = this.optionText(this.classes().find((c) => c.name === o.value));
  }

  classes() { return (this.byCluster && this.byCluster.get(this.cluster)) || []; }

  current() { return this.classes().find((c) => c.name === this.select.value) || null; }

  defaultName() {
    const d = this.classes().find((c) => (c.default_for || []).includes(this.kind));
    return d ? d.name : '';
  }

  // optionText is how the picker offers class c: its name and bounds.
  optionText(c) { return `${c.name}${c.name === this.defaultName() ? ' (default)' : ''} — ${bounds(c)}`; }

  renderOptions() {
    if (!this.byCluster || this.cluster === null) {
      if (this.loadError) replace(this.select, h('option', { value: '', text: 'the kind\'s default' }));
      this.select.disabled = !this.loadError;
      this.renderAsks();
      return;
    }
    const cs = this.classes();
    const want = this.picked && cs.some((c) => c.name === this.select.value) ? this.select.value : (this.defaultName() || (cs[0] && cs[0].name) || '');
    replace(this.select, cs.length ? cs.map((c) => h('option', { value: c.name, text: this.optionText(c) }))
      : h('option', { value: '', text: 'none offered to you here' }));
    this.select.value = want;
    this.select.disabled = false;
    this.renderAsks();
  }

  renderAsks() {
    const c = this.current();
    if (!c) {
      this.about.textContent = this.loadError || (this.byCluster ? 'This cluster offers you no pod class: a submit to it is refused.' : '');
      replace(this.asks);
      return;
    }
    this.about.textContent = shape(c);
    const cells = [];
    const g = c.allow && c.allow.gpus;
    if (g) {
      cells.push(this.cell('s-gpus', 'gpus', 'GPUs', `${g.min}–${g.max} ${c.gpu_resource}; default ${c.gpus}`, String(c.gpus),
        { type: 'number', min: g.min, max: g.max, step: 1, inputmode: 'numeric' }));
    }
    for (const n of resourceNames(c)) {
      const r = c.allow.resources[n];
      const def = (c.requests && c.requests[n]) || '';
      cells.push(this.cell('s-res-' + n.replace(/[^a-z0-9-]/gi, '-'), `resources[${n}]`, LABELS[n] || n,
        `${r.min ? 'from ' + r.min + ' ' : ''}up to ${r.max}${def ? '; default ' + def : ''}`, def, { type: 'text' }));
    }
    cells.push(this.cell('s-deadline', 'deadline', 'Deadline', `at most ${shortDuration(c.max_deadline)}; default ${shortDuration(c.deadline)}`,
      shortDuration(c.deadline), { type: 'text' }));
    replace(this.asks, cells);
  }

  // cell is one ask: its label, input, bound and a slot for its error.
  cell(id, name, label, hint, placeholder, attrs) {
    const input = h('input', { ...attrs, id, name, placeholder, value: this.typed[name] || '', autocomplete: 'off', spellcheck: 'false',
      'aria-describedby': id + '-hint ' + id + '-error' });
    input.addEventListener('input', () => { this.typed[name] = input.value; });
    return h('div', { class: 'ask' }, h('label', { for: id, text: label }), input,
      h('p', { class: 'hint', id: id + '-hint', text: hint }), h('p', { class: 'error field-error', id: id + '-error' }));
  }

  // ask is the submit's class fields: the class when it is not the kind's
  // default, and each ask typed into an input the class shows.
  ask() {
    const out = {};
    const c = this.current();
    if (!c) return out;
    if (c.name !== this.defaultName()) out.class = c.name;
    const gpus = this.asks.querySelector('[name="gpus"]');
    if (gpus && (gpus.validity.badInput || gpus.value !== '')) {
      if (!/^\d+$/.test(gpus.value)) throw fieldError('gpus', 'gpus: want a whole number');
      out.gpus = Number(gpus.value);
    }
    for (const input of this.asks.querySelectorAll('[name^="resources["]')) {
      const v = input.value.trim();
      if (v) (out.resources ||= {})[input.name.slice('resources['.length, -1)] = v;
    }
    const deadline = this.asks.querySelector('[name="deadline"]').value.trim();
    if (deadline) out.deadline = deadline;
    return out;
  }
}

// LogView renders a log of any length in a fixed viewport: lines live in
// an array and only the ~40 visible ones are in the DOM (fixed line height),
// so 100,000 lines stay as responsive as 100. It follows the end while the
// reader is at the bottom and pauses when they scroll up; a search narrows
// the view to matching lines and marks the match.
import { h } from './dom.js';

const LINE_H = 18;
const OVERSCAN = 10;

export class LogView {
  constructor() {
    this.lines = []; // {n, text}
    this.view = null; // indices into lines when searching, else null
    this.query = '';
    this.follow = true;
    this.scheduled = false;
    this.rows = h('div', { class: 'rows' });
    this.spacer = h('div', { class: 'spacer' }, this.rows);
    this.el = h('div', { class: 'logview', id: 'log', tabindex: '0', role: 'log', 'aria-label': 'Pod log', 'aria-live': 'off' }, this.spacer);
    this.status = h('span', { class: 'muted', id: 'log-status', 'aria-live': 'polite' });
    this.jump = h('button', { type: 'button', id: 'log-follow', text: 'Follow paused — jump to end', hidden: true,
      onclick: () => { this.follow = true; this.jump.hidden = true; this.render(); } });
    this.search = h('input', { type: 'search', id: 'log-search', placeholder: 'search the log', autocomplete: 'off' });
    this.search.addEventListener('input', () => this.setQuery(this.search.value));
    this.lastTop = 0;
    this.el.addEventListener('scroll', () => this.onScroll());
  }

  bar() {
    return h('div', { class: 'logbar' }, h('label', { for: 'log-search', class: 'sr-only', text: 'Search the log' }), this.search, this.jump, this.status);
  }

  // add appends lines ({n, text}); rendering waits for the next frame so a
  // burst of lines costs one render.
  add(...ls) {
    for (const l of ls) {
      this.lines.push(l);
      if (this.view && this.matches(l.text)) this.view.push(this.lines.length - 1);
    }
    this.schedule();
  }

  clear() { this.lines = []; this.view = this.query ? [] : null; this.schedule(); }

  matches(text) { return text.toLowerCase().includes(this.query); }

  setQuery(q) {
    this.query = q.toLowerCase();
    if (!this.query) this.view = null;
    else {
      this.view = [];
      for (let i = 0; i < this.lines.length; i++) if (this.matches(this.lines[i].text)) this.view.push(i);
    }
    this.render();
  }

  count() { return this.view ? this.view.length : this.lines.length; }

  onScroll() {
    const top = this.el.scrollTop;
    const atEnd = top + this.el.clientHeight >= this.el.scrollHeight - LINE_H;
    if (top < this.lastTop && !atEnd) this.follow = false; // the reader scrolled up
    else if (atEnd) this.follow = true;
    this.jump.hidden = this.follow;
    this.lastTop = top;
    this.schedule();
  }

  schedule() {
    if (this.scheduled) return;
    this.scheduled = true;
    requestAnimationFrame(() => { this.scheduled = false; this.render(); });
  }

  render() {
    const n = this.count();
    this.spacer.style.height = n * LINE_H + 'px'; // CSSOM, which the CSP allows
    if (this.follow) this.el.scrollTop = this.el.scrollHeight;
    this.lastTop = this.el.scrollTop;
    const first = Math.max(0, Math.floor(this.el.scrollTop / LINE_H) - OVERSCAN);
    const last = Math.min(n, Math.ceil((this.el.scrollTop + this.el.clientHeight) / LINE_H) + OVERSCAN);
    this.rows.style.transform = `translateY(${first * LINE_H}px)`;
    const frag = document.createDocumentFragment();
    for (let i = first; i < last; i++) {
      const l = this.lines[this.view ? this.view[i] : i];
      frag.append(h('div', { class: 'logline' }, h('span', { class: 'n', text: l.n }), ...this.marked(l.text)));
    }
    this.rows.replaceChildren(frag);
    this.status.textContent = this.view ? `${n} of ${this.lines.length} lines match` : `${this.lines.length} lines`;
  }

  // marked splits text around the search matches into text and <mark>.
  marked(text) {
    if (!this.query) return [text];
    const out = [], lower = text.toLowerCase();
    let at = 0, i;
    while ((i = lower.indexOf(this.query, at)) >= 0) {
      out.push(text.slice(at, i), h('mark', { text: text.slice(i, i + this.query.length) }));
      at = i + this.query.length;
    }
    out.push(text.slice(at));
    return out;
  }
}

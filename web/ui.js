// The dashboard's shared parts, used by every view (web/app.js,
// web/alerts.js): DOM building, times, the API client, the error banner and
// status line, the hash router's helpers, the flamegraph panel and the CPU
// timeline. No view lives here, and nothing here runs at import time but
// constant setup.
import { FlameGraph, formatValue } from './flame.js';

// ------------------------------------------------------------------ DOM --

export function h(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'testid') e.dataset.testid = v;
    else if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'text') e.textContent = v;
    // Through the CSSOM: the CSP forbids style attributes.
    else if (k === 'style') e.style.cssText = v;
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const k of kids.flat()) {
    if (k === null || k === undefined || k === false) continue;
    e.append(k instanceof Node ? k : String(k));
  }
  return e;
}

export const $ = (sel, root = document) => root.querySelector(sel);
export const tid = (id, root = document) => root.querySelector(`[data-testid="${id}"]`);

export function option(value, label, selected) {
  return h('option', { value, selected: selected ? true : null }, label);
}

// `value`: the selected value, or an array of them (a multiple select).
export function fillSelect(sel, items, value, anyLabel) {
  const chosen = (Array.isArray(value) ? value : [value]).filter((v) => v);
  sel.replaceChildren();
  if (anyLabel) sel.append(option('', anyLabel, chosen.length === 0));
  for (const it of items) {
    const [v, label] = Array.isArray(it) ? it : [it, it];
    sel.append(option(v, label, chosen.includes(v)));
  }
  // A value from a link that the server no longer lists stays selectable.
  for (const v of chosen)
    if (!items.some((it) => (Array.isArray(it) ? it[0] : it) === v)) sel.append(option(v, `${v} (not seen)`, true));
}

// ---------------------------------------------------------------- time --

export const TZ = Intl.DateTimeFormat().resolvedOptions().timeZone || 'local time';
export const fmtDateTime = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' });
export const fmtTime = new Intl.DateTimeFormat(undefined, { timeStyle: 'medium' });
export const fmtShort = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit' });
export const fmtDay = new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric' });

export const RANGES = [
  ['5m', 'last 5 minutes'], ['15m', 'last 15 minutes'], ['1h', 'last hour'],
  ['6h', 'last 6 hours'], ['24h', 'last 24 hours'], ['7d', 'last 7 days'],
];

// The API's from/to for a view's range: a preset ("1h" -> from=-1h) or
// absolute Unix seconds picked with the brush.
export function rangeParams(p, prefix = '') {
  const from = p.get(prefix + 'from'), to = p.get(prefix + 'to');
  if (from && to) return { from, to };
  return { from: '-' + (p.get(prefix + 'range') || p.get('range') || '1h'), to: 'now' };
}

// [from, to] in Unix ms of what rangeParams gives.
export function rangeMsOf(r) {
  if (/^\d+$/.test(r.from)) return [Number(r.from) * 1000, Number(r.to) * 1000];
  const m = /^-(\d+)([smhd])$/.exec(r.from);
  const unit = { s: 1e3, m: 60e3, h: 3600e3, d: 86400e3 };
  return [Date.now() - (m ? Number(m[1]) * unit[m[2]] : 3600e3), Date.now()];
}

export function rangeLabel(p, prefix = '') {
  const from = p.get(prefix + 'from'), to = p.get(prefix + 'to');
  if (from && to) return `${fmtDateTime.format(from * 1000)} – ${fmtTime.format(to * 1000)}`;
  const r = p.get(prefix + 'range') || p.get('range') || '1h';
  return (RANGES.find(([k]) => k === r) || [r, 'last ' + r])[1];
}

export function ago(ms) {
  const s = Math.max(0, (Date.now() - ms) / 1000);
  if (s < 90) return `${Math.round(s)} s ago`;
  if (s < 5400) return `${Math.round(s / 60)} min ago`;
  if (s < 129600) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}

// ----------------------------------------------------------------- API --

export const TOKEN_KEY = 'ember.token';

export class ApiError extends Error {
  constructor(status, message, path) {
    super(message);
    this.status = status;
    this.path = path;
  }
}

export function authHeaders() {
  const t = localStorage.getItem(TOKEN_KEY);
  return t ? { Authorization: `Bearer ${t}` } : {};
}

export function apiUrl(path, params) {
  const u = new URL(path, location.origin);
  for (const [k, v] of Object.entries(params || {})) {
    if (Array.isArray(v)) for (const x of v) u.searchParams.append(k, x);
    else if (v !== undefined && v !== null && v !== '') u.searchParams.set(k, v);
  }
  return u;
}

export async function api(path, params, { method = 'GET', body, signal } = {}) {
  const headers = authHeaders();
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let res;
  try {
    res = await fetch(apiUrl(path, params), {
      method, headers, signal, body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, `cannot reach the server (${e.message})`, path);
  }
  if (!res.ok) {
    let msg = `${res.status} ${res.statusText}`;
    try {
      const j = await res.json();
      if (j && j.error) msg = j.error;
    } catch { /* not JSON: keep the status line */ }
    if (res.status === 401) askToken();
    throw new ApiError(res.status, msg, path);
  }
  return res.json();
}

// ------------------------------------------------- banner, status, token --

export function showError(err) {
  if (!err || err.name === 'AbortError') return;
  console.warn('ember:', err);
  const box = tid('error');
  const where = err.path ? `${err.path}: ` : '';
  const code = err.status ? `${err.status} ` : '';
  $('.msg', box).textContent = `${where}${code}${err.message}`;
  box.hidden = false;
}

export function clearError() {
  tid('error').hidden = true;
}

// One line of what is happening, for the whole page; views set it around
// their loads. Panels show their own empty states too.
const busy = new Map();
export function setBusy(key, text) {
  if (text) busy.set(key, text);
  else busy.delete(key);
  const st = tid('status');
  st.textContent = [...busy.values()].join(' · ');
  st.classList.toggle('active', busy.size > 0);
}

export function askToken() {
  const d = $('#token-dialog');
  if (d.open) return;
  $('input', d).value = localStorage.getItem(TOKEN_KEY) || '';
  d.showModal();
}

// A download link that carries the token when one is set (a plain link
// cannot send an Authorization header).
export function downloadLink(testid, label, url, filename) {
  return h('a', {
    testid, href: url, download: filename, class: 'button',
    onclick: async (ev) => {
      if (!localStorage.getItem(TOKEN_KEY)) return;
      ev.preventDefault();
      try {
        const res = await fetch(url, { headers: authHeaders() });
        if (!res.ok) throw new ApiError(res.status, (await res.text()).trim(), url);
        const blobUrl = URL.createObjectURL(await res.blob());
        const a = h('a', { href: blobUrl, download: filename });
        document.body.append(a);
        a.click();
        a.remove();
        setTimeout(() => URL.revokeObjectURL(blobUrl), 10000);
      } catch (e) {
        showError(e);
      }
    },
  }, label);
}

// -------------------------------------------------------------- router --

export function parseHash() {
  const raw = location.hash.replace(/^#\/?/, '');
  const [path, qs = ''] = raw.split('?');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  return { view: parts[0] || 'explore', arg: parts[1] || null, params: new URLSearchParams(qs) };
}

export function hashOf(view, params, arg) {
  const qs = params.toString();
  return `#/${view}${arg ? '/' + encodeURIComponent(arg) : ''}${qs ? '?' + qs : ''}`;
}

// params with `changes` applied: null, undefined, '' or [] removes a key;
// an array repeats it.
export function withChanges(params, changes) {
  const p = new URLSearchParams(params);
  for (const [k, v] of Object.entries(changes)) {
    p.delete(k);
    if (Array.isArray(v)) for (const x of v) p.append(k, x);
    else if (v !== null && v !== undefined && v !== '') p.set(k, v);
  }
  return p;
}

// push: a new history entry (a choice the user may go back from); replace:
// the same entry (zoom, search, typing).
export function navigate(view, params, arg, { replace = false } = {}) {
  const next = hashOf(view, params, arg);
  if (next === location.hash) return;
  if (replace) history.replaceState(null, '', next);
  else history.pushState(null, '', next);
  router();
}

// What navigate() runs once the hash has changed: app.js's route().
let router = () => {};
export function onNavigate(fn) {
  router = fn;
}

// --------------------------------------------------------- flame panel --

// A flamegraph with its toolbar: search box, totals, reset. `onState` is
// told of zoom and search changes so the view can put them in the URL.
export function flamePanel(testid, { searchId = null, onState = () => {} } = {}) {
  const info = h('span', { class: 'info' });
  const matches = h('span', { class: 'matches' });
  const search = h('input', {
    type: 'search', placeholder: 'Search functions ( / )', testid: searchId, class: 'flame-search',
    spellcheck: 'false',
  });
  const reset = h('button', { type: 'button', title: 'Reset zoom (Esc)' }, 'Reset zoom');
  const box = h('div', { class: 'flame', testid });
  const empty = h('div', { class: 'empty' }, 'No profile loaded.');
  const panel = h('section', { class: 'panel flame-panel' },
    h('div', { class: 'toolbar' }, search, matches, reset, h('span', { class: 'spacer' }), info),
    empty, box);
  let unit = 'count', total = 0;
  const fg = new FlameGraph(box, { onZoom: (path) => onState({ zoom: path.join(';') }) });
  const applySearch = () => {
    const r = fg.setSearch(search.value);
    matches.textContent = search.value
      ? `${r.matches} match${r.matches === 1 ? '' : 'es'}, ${formatValue(r.total, unit)}` +
        (total ? ` (${((100 * r.total) / total).toFixed(1)}%)` : '')
      : '';
  };
  const onSearch = () => {
    applySearch();
    onState({ q: search.value });
  };
  search.addEventListener('input', onSearch);
  // Chromium clears a search field on Escape and by its clear button
  // without an input event: 'search' tells.
  search.addEventListener('search', onSearch);
  reset.addEventListener('click', () => fg.resetZoom());
  return {
    el: panel, fg, search,
    // Show a tree (API JSON) or an empty-state sentence; zoom and search
    // come from the URL.
    show(tree, { zoom = '', q = '', emptyText = 'No samples in this selection.' } = {}) {
      const diff = tree && tree.root && tree.root.base !== undefined;
      total = !tree ? 0 : diff ? Math.max(tree.base.total, tree.vs.total) : tree.total;
      unit = tree ? tree.unit : 'count';
      if (!tree || total === 0) {
        empty.textContent = emptyText;
        empty.hidden = false;
        box.hidden = true;
        fg.setTree({ version: 1, type: 'cpu', unit: 'count', total: 0, nodes: 0, root: { name: 'all', self: 0, total: 0, children: [] } });
        info.textContent = '';
        return;
      }
      empty.hidden = true;
      box.hidden = false;
      fg.setTree(tree);
      if (zoom) fg.zoomToPath(zoom.split(';'));
      search.value = q;
      applySearch();
      info.textContent = diff
        ? `A ${formatValue(tree.base.total, unit)} · B ${formatValue(tree.vs.total, unit)} · ${tree.nodes} nodes`
        : `${formatValue(tree.total, unit)} · ${tree.nodes} nodes`;
      if (tree.truncated) info.textContent += ' · smallest frames folded into their callers';
    },
    loading(text) {
      empty.textContent = text;
      empty.hidden = false;
      box.hidden = true;
    },
  };
}

// ----------------------------------------------------------- timeline --

export const PALETTE = ['#e4572e', '#4e79a7', '#59a14f', '#edc948', '#b07aa1', '#76b7b2', '#ff9da7', '#9c755f', '#f28e2b', '#bab0ac'];

// Colours of an alert's state, on timelines and badges (style.css has the
// same for .badge).
export const ALERT_COLORS = { firing: '#c92a2a', pending: '#e67700', resolved: '#868e96' };

// Cores over time, one stacked band per version, with a brush: dragging
// picks [from, to) (onBrush gets Unix seconds); a double click resets.
// onBrush null: no brush (a timeline to look at). Alerts set with
// setAlerts() are bands with a bar along the top; a click on the bar (or
// on the alert's link in the toolbar) calls their onPick.
export function timeline(onBrush, hint = 'drag to pick a range, double-click to go back', { testid = 'timeline' } = {}) {
  const canvas = h('canvas', { testid: 'timeline-canvas' });
  const legend = h('div', { class: 'legend' });
  const alertLinks = h('span', { class: 'alert-links', testid: 'timeline-alerts' });
  const tip = h('div', { class: 'tip', hidden: true });
  const empty = h('div', { class: 'empty' }, 'Loading the timeline…');
  const wrap = h('div', { class: 'timeline-wrap' }, canvas, tip);
  // What the bands measure: CPU cores (set) or the in-use heap (setHeap).
  const title = h('strong', {}, 'CPU');
  const unitHint = h('span', { class: 'hint' });
  const el = h('section', { class: 'panel timeline', testid }, h('div', { class: 'toolbar' }, title, unitHint, alertLinks, h('span', { class: 'spacer' }), legend), empty, wrap);
  const CPU_UNIT = { name: 'cores', title: 'CPU', hint: ' cores, by version', axis: (v) => v.toFixed(v < 1 ? 2 : 1), tip: (v) => `${v.toFixed(2)} cores` };
  const setUnit = (u) => {
    title.textContent = u.title;
    unitHint.textContent = `${u.hint}${hint ? ' · ' + hint : ''}`;
    el.dataset.unit = u.name;
  };
  setUnit(CPU_UNIT);
  let data = null, drag = null, layout = null;
  let marks = []; // [{from, to (ms), color}]: ranges chosen elsewhere, shaded
  let threshold = null; // {value (cores), label}: a dashed line
  let alerts = []; // [{id, label, state, from, to (ms)}]
  let onPick = null;
  const PAD = { l: 44, r: 8, t: 8, b: 22 };
  const BAR = 6; // px: the alerts' bar along the top of the plot, and its hit zone

  function draw() {
    const dpr = window.devicePixelRatio || 1;
    const w = wrap.clientWidth || 800, hgt = 140;
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(hgt * dpr);
    canvas.style.width = w + 'px';
    canvas.style.height = hgt + 'px';
    const g = canvas.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, hgt);
    if (!data) return;
    const { buckets, bands, from, step } = data;
    const pw = w - PAD.l - PAD.r, ph = hgt - PAD.t - PAD.b;
    let max = 0;
    for (let i = 0; i < buckets; i++) {
      let s = 0;
      for (const b of bands) s += b.cores[i];
      max = Math.max(max, s);
    }
    if (threshold) max = Math.max(max, threshold.value * 1.15);
    max = max > 0 ? niceMax(max) : 1;
    const x = (i) => PAD.l + (i / buckets) * pw;
    const y = (v) => PAD.t + ph - (v / max) * ph;
    layout = { x0: PAD.l, pw, buckets, from, step };
    // Grid and y labels.
    g.font = '11px system-ui, sans-serif';
    g.fillStyle = '#777';
    g.strokeStyle = '#e5e5e5';
    g.lineWidth = 1;
    for (let k = 0; k <= 4; k++) {
      const v = (max * k) / 4, yy = Math.round(y(v)) + 0.5;
      g.beginPath(); g.moveTo(PAD.l, yy); g.lineTo(w - PAD.r, yy); g.stroke();
      g.fillText(data.unit.axis(v), 4, yy + 4);
    }
    // Stacked bands, as steps (each bucket is a 10 s+ aggregate).
    const base = new Float64Array(buckets);
    bands.forEach((b) => {
      g.beginPath();
      g.moveTo(x(0), y(base[0]));
      for (let i = 0; i < buckets; i++) {
        g.lineTo(x(i), y(base[i] + b.cores[i]));
        g.lineTo(x(i + 1), y(base[i] + b.cores[i]));
      }
      for (let i = buckets - 1; i >= 0; i--) {
        g.lineTo(x(i + 1), y(base[i]));
        g.lineTo(x(i), y(base[i]));
      }
      g.closePath();
      g.globalAlpha = b.dim ? 0.25 : 0.8;
      g.fillStyle = b.color;
      g.fill();
      g.globalAlpha = 1;
      for (let i = 0; i < buckets; i++) base[i] += b.cores[i];
    });
    // Time axis in the viewer's zone.
    const span = buckets * step;
    const fmt = span > 2 * 86400000 ? fmtDay : span > 3600000 ? fmtShort : fmtTime;
    const ticks = Math.max(2, Math.floor(pw / 110));
    g.fillStyle = '#777';
    for (let k = 0; k <= ticks; k++) {
      const t = from + (span * k) / ticks;
      const xx = PAD.l + (pw * k) / ticks;
      const label = fmt.format(t);
      const tw = g.measureText(label).width;
      g.fillText(label, Math.min(Math.max(xx - tw / 2, PAD.l), w - PAD.r - tw), hgt - 6);
    }
    for (const [mi, m] of marks.entries()) {
      const a = Math.max(PAD.l, PAD.l + ((m.from - from) / span) * pw);
      const b = Math.min(w - PAD.r, PAD.l + ((m.to - from) / span) * pw);
      if (b <= a) continue;
      g.globalAlpha = 0.18;
      g.fillStyle = m.color;
      g.fillRect(a, PAD.t, b - a, ph);
      g.globalAlpha = 1;
      g.fillStyle = m.color;
      g.fillText(m.label, a + 3, PAD.t + 11 + 12 * mi);
    }
    const xAt = (t) => PAD.l + ((t - from) / span) * pw;
    layout.alertBars = [];
    for (const al of alerts) {
      const a = Math.max(PAD.l, xAt(al.from));
      // A band at least 3 px wide, so a short alert can still be clicked.
      const b = Math.min(w - PAD.r, Math.max(xAt(al.to), a + 3));
      if (b <= PAD.l || a >= w - PAD.r) continue;
      g.fillStyle = ALERT_COLORS[al.state] || ALERT_COLORS.resolved;
      g.globalAlpha = 0.1;
      g.fillRect(a, PAD.t, b - a, ph);
      g.globalAlpha = 1;
      g.fillRect(a, PAD.t, b - a, BAR);
      layout.alertBars.push({ a, b, al });
    }
    if (threshold) {
      const yy = Math.round(y(threshold.value)) + 0.5;
      g.save();
      g.strokeStyle = ALERT_COLORS.firing;
      g.setLineDash([5, 4]);
      g.beginPath(); g.moveTo(PAD.l, yy); g.lineTo(w - PAD.r, yy); g.stroke();
      g.restore();
      g.fillStyle = ALERT_COLORS.firing;
      const tw = g.measureText(threshold.label).width;
      // Above the line, or below it where the marks' labels are.
      const above = yy - 4 > PAD.t + 14 + 12 * marks.length;
      g.fillText(threshold.label, w - PAD.r - tw - 2, above ? yy - 4 : yy + 12);
    }
    if (drag) {
      const a = Math.min(drag.x0, drag.x1), b = Math.max(drag.x0, drag.x1);
      g.fillStyle = 'rgba(30, 90, 200, 0.15)';
      g.fillRect(a, PAD.t, b - a, ph);
      g.strokeStyle = 'rgba(30, 90, 200, 0.8)';
      g.strokeRect(a + 0.5, PAD.t + 0.5, b - a, ph);
    }
  }

  function niceMax(v) {
    const p = 10 ** Math.floor(Math.log10(v));
    for (const m of [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  const px = (ev) => ev.clientX - canvas.getBoundingClientRect().left;
  const py = (ev) => ev.clientY - canvas.getBoundingClientRect().top;
  const timeAt = (xx) => layout.from + ((xx - layout.x0) / layout.pw) * layout.buckets * layout.step;
  // The alert whose bar is under the pointer (the bar and a few px below).
  const alertAt = (ev) => {
    if (!layout || !layout.alertBars || py(ev) > PAD.t + BAR + 4) return null;
    const xx = px(ev);
    const hit = layout.alertBars.filter((r) => xx >= r.a - 1 && xx <= r.b + 1);
    return hit.length ? hit[hit.length - 1].al : null;
  };
  canvas.addEventListener('pointerdown', (ev) => {
    if (!layout) return;
    const al = alertAt(ev);
    if (al && onPick) {
      onPick(al);
      return;
    }
    if (!onBrush) return;
    canvas.setPointerCapture(ev.pointerId);
    drag = { x0: px(ev), x1: px(ev) };
  });
  canvas.addEventListener('pointermove', (ev) => {
    if (!layout) return;
    const xx = Math.min(Math.max(px(ev), layout.x0), layout.x0 + layout.pw);
    if (drag) {
      drag.x1 = xx;
      draw();
    }
    const al = alertAt(ev);
    canvas.style.cursor = al && onPick ? 'pointer' : onBrush ? 'crosshair' : 'default';
    const i = Math.floor(((xx - layout.x0) / layout.pw) * layout.buckets);
    if (i < 0 || i >= layout.buckets) return;
    const t = layout.from + i * layout.step;
    tip.replaceChildren(h('div', {}, `${fmtDateTime.format(t)}`),
      ...(al ? [h('div', {}, `alert ${al.label} (${al.state}): click to open it`)] : []),
      ...data.bands.filter((b) => b.cores[i] > 0).map((b) => h('div', {}, h('span', { class: 'swatch', style: `background:${b.color}` }), `${b.label}: ${data.unit.tip(b.cores[i])}`)));
    tip.hidden = false;
    tip.style.left = Math.min(xx + 12, wrap.clientWidth - 200) + 'px';
  });
  canvas.addEventListener('pointerleave', () => { tip.hidden = true; });
  canvas.addEventListener('pointerup', () => {
    if (!drag) return;
    const a = Math.min(drag.x0, drag.x1), b = Math.max(drag.x0, drag.x1);
    drag = null;
    draw();
    if (b - a < 4) return; // a click, not a drag
    onBrush(Math.floor(timeAt(a) / 1000), Math.ceil(timeAt(b) / 1000));
  });
  canvas.addEventListener('dblclick', () => { if (onBrush) onBrush(null, null); });
  new ResizeObserver(() => draw()).observe(wrap);

  function show(d, any, none) {
    data = d;
    setUnit(d.unit);
    legend.replaceChildren(...d.bands.map((b) => h('span', { class: 'key' }, h('span', { class: 'swatch', style: `background:${b.color}` }), b.label)));
    empty.textContent = none;
    empty.hidden = any;
    el.dataset.max = String(Math.max(0, ...d.bands.map((b) => Math.max(0, ...b.cores))));
    draw();
  }

  return {
    el,
    loading(text) {
      empty.textContent = text;
      empty.hidden = false;
    },
    setMarks(m) {
      marks = m;
      draw();
    },
    // A dashed line at `value` cores (null: none).
    setThreshold(value, label) {
      threshold = value === null || value === undefined ? null : { value, label };
      el.dataset.threshold = threshold ? String(value) : '';
      draw();
    },
    // Alerts over the timeline: [{id, label, state, from, to (ms)}]; each
    // also gets a link in the toolbar (keyboard, and a name to read).
    // pick(alert) is called on a click on either.
    setAlerts(list, pick) {
      alerts = list;
      onPick = pick;
      el.dataset.alerts = String(list.length);
      alertLinks.replaceChildren(...list.map((al) => h('a', {
        class: `alert-link ${al.state}`, testid: 'timeline-alert', href: al.href, 'data-id': al.id,
        title: `${al.label}: ${al.state}, from ${fmtDateTime.format(al.from)}`,
        onclick: (ev) => { ev.preventDefault(); pick(al); },
      }, `${al.state === 'resolved' ? '✓' : '▲'} ${al.label}`)));
      draw();
    },
    // tl: the /api/v1/timeline answer; `version`: the one selected (others dimmed).
    // `versions`: those selected (others dimmed); empty = all.
    set(tl, versions = []) {
      const buckets = tl.total_cpu_ns.length;
      const byVersion = new Map();
      for (const s of tl.series) {
        const key = s.version ?? '(none)';
        let arr = byVersion.get(key);
        if (!arr) byVersion.set(key, (arr = new Float64Array(buckets)));
        for (let i = 0; i < buckets; i++) arr[i] += s.cpu_ns[i] / (tl.step_ms * 1e6);
      }
      const keys = [...byVersion.keys()].sort();
      const bands = keys.map((k, i) => ({ label: k, cores: byVersion.get(k), color: PALETTE[i % PALETTE.length], dim: versions.length > 0 && !versions.includes(k) }));
      if (tl.truncated) {
        // Series left out by the limit: their CPU still shows, as "other".
        const other = new Float64Array(buckets);
        for (let i = 0; i < buckets; i++) {
          let s = 0;
          for (const b of bands) s += b.cores[i];
          other[i] = Math.max(0, tl.total_cpu_ns[i] / (tl.step_ms * 1e6) - s);
        }
        bands.push({ label: 'other series', cores: other, color: '#bbb', dim: false });
      }
      show({ buckets, bands, from: tl.from_ms, step: tl.step_ms, unit: CPU_UNIT }, tl.total_cpu_ns.some((v) => v > 0), 'No CPU samples in this range.');
    },
    // ht: the /api/v1/heap/timeline answer grouped by version: the in-use
    // heap (bytes or objects) at each bucket, stacked by version. A
    // snapshot per bucket, never a sum over windows.
    setHeap(ht, versions = []) {
      const objects = ht.type === 'inuse_objects';
      const unit = objects
        ? { name: 'objects', title: 'In-use objects', hint: ', by version', axis: (v) => formatValue(v, 'count'), tip: (v) => `${formatValue(v, 'count')} objects` }
        : { name: 'bytes', title: 'In-use heap', hint: ' bytes, by version', axis: (v) => formatValue(v, 'bytes'), tip: (v) => formatValue(v, 'bytes') };
      const groups = [...ht.groups].sort((a, b) => String(a.version ?? '(none)').localeCompare(String(b.version ?? '(none)')));
      const bands = groups.map((g, i) => {
        const k = g.version ?? '(none)';
        return { label: k, cores: Float64Array.from(g.values), color: PALETTE[i % PALETTE.length], dim: versions.length > 0 && !versions.includes(k) };
      });
      show({ buckets: ht.total.length, bands, from: ht.from_ms, step: ht.step_ms, unit }, ht.total.some((v) => v > 0), 'No in-use heap in this range: the heap comes from processes running with libember_alloc.so (docs/heap.md).');
    },
  };
}


// ------------------------------------------------------ shared values --

export const TYPES = [['cpu', 'CPU time'], ['samples', 'CPU samples'], ['alloc_bytes', 'Allocated bytes'], ['alloc_objects', 'Allocated objects'], ['inuse_bytes', 'In-use bytes'], ['inuse_objects', 'In-use objects']];
// Nodes asked for a flamegraph: past this the smallest frames fold into
// their callers (the answer says so); the renderer handles 100k.
export const MAX_NODES = 20000;

// The states a session does not leave.
export const FINISHED = new Set(['done', 'failed', 'expired', 'cancelled']);

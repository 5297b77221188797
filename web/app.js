// Ember's dashboard: Explore (history of a worker: timeline, flamegraph,
// top functions), Compare (two selections as a differential flamegraph)
// and Sessions (on-demand profiles). Plain ES modules, no framework and no
// build step: the collector serves these files from its binary
// (docs/internals/dashboard.md). All data comes from /api/v1 (docs/api.md).
//
// State lives in the URL hash (#/explore?worker=api&range=1h...), so a link
// reproduces a view; every API error is shown in the banner, and every
// panel says when it is loading or empty.
import { FlameGraph, formatValue } from './flame.js';

// ------------------------------------------------------------------ DOM --

function h(tag, attrs, ...kids) {
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

const $ = (sel, root = document) => root.querySelector(sel);
const tid = (id, root = document) => root.querySelector(`[data-testid="${id}"]`);

function option(value, label, selected) {
  return h('option', { value, selected: selected ? true : null }, label);
}

// `value`: the selected value, or an array of them (a multiple select).
function fillSelect(sel, items, value, anyLabel) {
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

const TZ = Intl.DateTimeFormat().resolvedOptions().timeZone || 'local time';
const fmtDateTime = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' });
const fmtTime = new Intl.DateTimeFormat(undefined, { timeStyle: 'medium' });
const fmtShort = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit' });
const fmtDay = new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric' });

const RANGES = [
  ['5m', 'last 5 minutes'], ['15m', 'last 15 minutes'], ['1h', 'last hour'],
  ['6h', 'last 6 hours'], ['24h', 'last 24 hours'], ['7d', 'last 7 days'],
];

// The API's from/to for a view's range: a preset ("1h" -> from=-1h) or
// absolute Unix seconds picked with the brush.
function rangeParams(p, prefix = '') {
  const from = p.get(prefix + 'from'), to = p.get(prefix + 'to');
  if (from && to) return { from, to };
  return { from: '-' + (p.get(prefix + 'range') || p.get('range') || '1h'), to: 'now' };
}

// [from, to] in Unix ms of what rangeParams gives.
function rangeMsOf(r) {
  if (/^\d+$/.test(r.from)) return [Number(r.from) * 1000, Number(r.to) * 1000];
  const m = /^-(\d+)([smhd])$/.exec(r.from);
  const unit = { s: 1e3, m: 60e3, h: 3600e3, d: 86400e3 };
  return [Date.now() - (m ? Number(m[1]) * unit[m[2]] : 3600e3), Date.now()];
}

function rangeLabel(p, prefix = '') {
  const from = p.get(prefix + 'from'), to = p.get(prefix + 'to');
  if (from && to) return `${fmtDateTime.format(from * 1000)} – ${fmtTime.format(to * 1000)}`;
  const r = p.get(prefix + 'range') || p.get('range') || '1h';
  return (RANGES.find(([k]) => k === r) || [r, 'last ' + r])[1];
}

function ago(ms) {
  const s = Math.max(0, (Date.now() - ms) / 1000);
  if (s < 90) return `${Math.round(s)} s ago`;
  if (s < 5400) return `${Math.round(s / 60)} min ago`;
  if (s < 129600) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}

// ----------------------------------------------------------------- API --

const TOKEN_KEY = 'ember.token';

class ApiError extends Error {
  constructor(status, message, path) {
    super(message);
    this.status = status;
    this.path = path;
  }
}

function authHeaders() {
  const t = localStorage.getItem(TOKEN_KEY);
  return t ? { Authorization: `Bearer ${t}` } : {};
}

function apiUrl(path, params) {
  const u = new URL(path, location.origin);
  for (const [k, v] of Object.entries(params || {})) {
    if (Array.isArray(v)) for (const x of v) u.searchParams.append(k, x);
    else if (v !== undefined && v !== null && v !== '') u.searchParams.set(k, v);
  }
  return u;
}

async function api(path, params, { method = 'GET', body, signal } = {}) {
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

function showError(err) {
  if (!err || err.name === 'AbortError') return;
  console.warn('ember:', err);
  const box = tid('error');
  const where = err.path ? `${err.path}: ` : '';
  const code = err.status ? `${err.status} ` : '';
  $('.msg', box).textContent = `${where}${code}${err.message}`;
  box.hidden = false;
}

function clearError() {
  tid('error').hidden = true;
}

// One line of what is happening, for the whole page; views set it around
// their loads. Panels show their own empty states too.
const busy = new Map();
function setBusy(key, text) {
  if (text) busy.set(key, text);
  else busy.delete(key);
  const st = tid('status');
  st.textContent = [...busy.values()].join(' · ');
  st.classList.toggle('active', busy.size > 0);
}

function askToken() {
  const d = $('#token-dialog');
  if (d.open) return;
  $('input', d).value = localStorage.getItem(TOKEN_KEY) || '';
  d.showModal();
}

// A download link that carries the token when one is set (a plain link
// cannot send an Authorization header).
function downloadLink(testid, label, url, filename) {
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

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, '');
  const [path, qs = ''] = raw.split('?');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  return { view: parts[0] || 'explore', arg: parts[1] || null, params: new URLSearchParams(qs) };
}

function hashOf(view, params, arg) {
  const qs = params.toString();
  return `#/${view}${arg ? '/' + encodeURIComponent(arg) : ''}${qs ? '?' + qs : ''}`;
}

// params with `changes` applied: null, undefined, '' or [] removes a key;
// an array repeats it.
function withChanges(params, changes) {
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
function navigate(view, params, arg, { replace = false } = {}) {
  const next = hashOf(view, params, arg);
  if (next === location.hash) return;
  if (replace) history.replaceState(null, '', next);
  else history.pushState(null, '', next);
  route();
}

// --------------------------------------------------------- flame panel --

// A flamegraph with its toolbar: search box, totals, reset. `onState` is
// told of zoom and search changes so the view can put them in the URL.
function flamePanel(testid, { searchId = null, onState = () => {} } = {}) {
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

// The flamegraph of the visible view, for the keyboard shortcuts.
let activeFlame = null;

// ----------------------------------------------------------- timeline --

const PALETTE = ['#e4572e', '#4e79a7', '#59a14f', '#edc948', '#b07aa1', '#76b7b2', '#ff9da7', '#9c755f', '#f28e2b', '#bab0ac'];

// Cores over time, one stacked band per version, with a brush: dragging
// picks [from, to) (onBrush gets Unix seconds); a double click resets.
function timeline(onBrush, hint = 'drag to pick a range, double-click to go back') {
  const canvas = h('canvas', { testid: 'timeline-canvas' });
  const legend = h('div', { class: 'legend' });
  const tip = h('div', { class: 'tip', hidden: true });
  const empty = h('div', { class: 'empty' }, 'Loading the timeline…');
  const wrap = h('div', { class: 'timeline-wrap' }, canvas, tip);
  const el = h('section', { class: 'panel timeline', testid: 'timeline' }, h('div', { class: 'toolbar' }, h('strong', {}, 'CPU'), h('span', { class: 'hint' }, ` cores, by version · ${hint}`), h('span', { class: 'spacer' }), legend), empty, wrap);
  let data = null, drag = null, layout = null;
  let marks = []; // [{from, to (ms), color}]: ranges chosen elsewhere, shaded
  const PAD = { l: 44, r: 8, t: 8, b: 22 };

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
      g.fillText(v.toFixed(v < 1 ? 2 : 1), 4, yy + 4);
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
  const timeAt = (xx) => layout.from + ((xx - layout.x0) / layout.pw) * layout.buckets * layout.step;
  canvas.addEventListener('pointerdown', (ev) => {
    if (!layout) return;
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
    const i = Math.floor(((xx - layout.x0) / layout.pw) * layout.buckets);
    if (i < 0 || i >= layout.buckets) return;
    const t = layout.from + i * layout.step;
    tip.replaceChildren(h('div', {}, `${fmtDateTime.format(t)}`),
      ...data.bands.filter((b) => b.cores[i] > 0).map((b) => h('div', {}, h('span', { class: 'swatch', style: `background:${b.color}` }), `${b.label}: ${b.cores[i].toFixed(2)} cores`)));
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
  canvas.addEventListener('dblclick', () => onBrush(null, null));
  new ResizeObserver(() => draw()).observe(wrap);

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
      data = { buckets, bands, from: tl.from_ms, step: tl.step_ms };
      legend.replaceChildren(...bands.map((b) => h('span', { class: 'key' }, h('span', { class: 'swatch', style: `background:${b.color}` }), b.label)));
      const any = tl.total_cpu_ns.some((v) => v > 0);
      empty.textContent = 'No CPU samples in this range.';
      empty.hidden = any;
      draw();
    },
  };
}

// ------------------------------------------------------------- explore --

const TYPES = [['cpu', 'CPU time'], ['samples', 'CPU samples'], ['alloc_bytes', 'Allocated bytes'], ['alloc_objects', 'Allocated objects']];
// Nodes asked for a flamegraph: past this the smallest frames fold into
// their callers (the answer says so); the renderer handles 100k.
const MAX_NODES = 20000;

function exploreView() {
  let params = new URLSearchParams();
  let workers = [];
  let ctl = null; // aborts the loads of a superseded state
  let loaded = ''; // the state the data on screen is for
  let topData = null; // the last top-functions answer, re-sorted locally

  const set = (changes, opts) => navigate('explore', withChanges(params, changes), null, opts);

  const workerSearch = h('input', { type: 'search', placeholder: 'Filter workers', testid: 'worker-search', spellcheck: 'false' });
  const workerList = h('ul', { class: 'worker-list', testid: 'worker-list' });
  const workerEmpty = h('div', { class: 'empty' }, 'Loading workers…');
  // Several versions can be chosen (Ctrl/Shift-click): their profiles add up.
  const versionSel = h('select', { testid: 'version-select', multiple: true, class: 'multi', title: 'Versions: Ctrl-click (or Shift-click) to choose several' });
  let versionsShown = []; // what the URL had when the select was filled
  const hostSel = h('select', { testid: 'host-select', title: 'Host' });
  const actorSel = h('select', { testid: 'actor-select', title: 'Actor' });
  const typeSel = h('select', { testid: 'type-select', title: 'Profile type' });
  const rangeSel = h('select', { testid: 'range-select', title: 'Time range' });
  const rangeText = h('span', { class: 'range-text' });
  const downloads = h('span', { class: 'downloads' });
  // Refresh: load the same view again (new windows arrive every 10 s);
  // Live: do it every 10 s while the range ends now.
  const refreshBtn = h('button', { type: 'button', testid: 'refresh', title: 'Load again' }, 'Refresh');
  const liveBox = h('input', { type: 'checkbox', testid: 'live' });
  const LIVE_MS = 10000;
  let liveTimer = null;
  refreshBtn.addEventListener('click', () => { loaded = ''; load(true); });
  liveBox.addEventListener('change', () => set({ live: liveBox.checked ? '1' : null }, { replace: true }));
  const topTable = h('table', { class: 'top', testid: 'top-table' });
  const topEmpty = h('div', { class: 'empty' });

  versionSel.addEventListener('change', () => {
    let vs = [...versionSel.selectedOptions].map((o) => o.value);
    // "all versions" beside some: adding a version to "all" means that
    // version; choosing "all" beside versions means all.
    if (vs.includes('') && vs.length > 1) vs = versionsShown.length === 0 ? vs.filter((v) => v) : [];
    set({ version: vs.filter((v) => v), zoom: null });
  });
  hostSel.addEventListener('change', () => set({ host: hostSel.value, zoom: null }));
  actorSel.addEventListener('change', () => set({ actor: actorSel.value, zoom: null }));
  typeSel.addEventListener('change', () => set({ type: typeSel.value, zoom: null }));
  rangeSel.addEventListener('change', () => {
    if (rangeSel.value === 'custom') return;
    set({ range: rangeSel.value, from: null, to: null });
  });
  workerSearch.addEventListener('input', () => renderWorkers());

  const flame = flamePanel('flame', { searchId: 'flame-search', onState: (s) => set(s, { replace: true }) });
  // The preset stays in the URL beside a brushed from/to (which win), so a
  // double-click goes back to it.
  const tl = timeline((from, to) => set({ from, to, zoom: null }));

  const el = h('div', { class: 'explore' },
    h('aside', { class: 'sidebar' }, h('h2', {}, 'Workers'), workerSearch, workerEmpty, workerList),
    h('div', { class: 'content' },
      h('div', { class: 'controls' },
        h('h1', { class: 'title', testid: 'explore-title' }, ''),
        h('label', {}, 'Version ', versionSel), h('label', {}, 'Host ', hostSel),
        h('label', {}, 'Actor ', actorSel), h('label', {}, 'Type ', typeSel),
        h('label', {}, 'Range ', rangeSel), rangeText, refreshBtn,
        h('label', { title: 'Refresh every 10 s while the range ends now' }, liveBox, ' live'),
        h('span', { class: 'spacer' }), downloads),
      tl.el, flame.el,
      h('section', { class: 'panel' }, h('div', { class: 'toolbar' }, h('strong', {}, 'Top functions'), h('span', { class: 'hint' }, ' click a row to find it in the flamegraph')), topEmpty, h('div', { class: 'top-panel' }, topTable))));

  function renderWorkers() {
    const q = workerSearch.value.trim().toLowerCase();
    const shown = workers.filter((w) => w.worker.toLowerCase().includes(q));
    const cur = params.get('worker');
    workerList.replaceChildren(...shown.map((w) => h('li', {
      testid: 'worker-item', class: w.worker === cur ? 'selected' : null, tabindex: '0', title: w.worker,
      onclick: () => set({ worker: w.worker, version: null, host: null, actor: null, zoom: null, q: null }),
      onkeydown: (ev) => { if (ev.key === 'Enter') ev.currentTarget.click(); },
    }, h('span', { class: 'name' }, w.worker),
    h('span', { class: 'meta' }, `${w.versions.length} version${w.versions.length === 1 ? '' : 's'} · ${w.hosts.length} host${w.hosts.length === 1 ? '' : 's'} · ${ago(w.last_ms)}`))));
    workerEmpty.hidden = shown.length > 0;
    workerEmpty.textContent = workers.length === 0
      ? `No worker sent profiles in the ${rangeLabel(params)}. Is an agent running (ember-agent, or ember up) and does its selector match?`
      : `No worker matches “${workerSearch.value}”.`;
  }

  function renderTop(top, sort) {
    const unit = top.unit;
    const head = h('tr', {}, ...[['name', 'Function'], ['self', 'Self'], ['total', 'Total']].map(([k, label]) => h('th', {
      'data-sort': k, class: sort.key === k ? `sorted ${sort.dir}` : null, tabindex: '0', title: `Sort by ${label.toLowerCase()}`,
      // Numbers sort largest first, names A to Z; a second click reverses.
      onclick: () => {
        const first = k === 'name' ? 'asc' : 'desc';
        const dir = sort.key === k ? (sort.dir === 'asc' ? 'desc' : 'asc') : first;
        set({ sort: `${k}:${dir}` }, { replace: true });
      },
    }, label)));
    const rows = [...top.functions];
    const dir = sort.dir === 'asc' ? 1 : -1;
    rows.sort((a, b) => (sort.key === 'name' ? a.name.localeCompare(b.name) : a[sort.key] - b[sort.key]) * dir || a.name.localeCompare(b.name));
    const pct = (v) => (top.total ? `${((100 * v) / top.total).toFixed(2)}%` : '');
    topTable.replaceChildren(h('thead', {}, head), h('tbody', {}, ...rows.map((f) => h('tr', {
      title: f.module || '', onclick: () => { flame.search.value = f.name; flame.search.dispatchEvent(new Event('input')); flame.el.scrollIntoView({ block: 'nearest' }); },
    }, h('td', { class: 'fn' }, f.name, f.module ? h('span', { class: 'module' }, ` ${f.module.split('/').pop()}`) : null),
    h('td', { class: 'num' }, formatValue(f.self, unit), h('span', { class: 'pct' }, pct(f.self))),
    h('td', { class: 'num' }, formatValue(f.total, unit), h('span', { class: 'pct' }, pct(f.total)))))));
    topEmpty.hidden = rows.length > 0;
    topEmpty.textContent = 'No functions in this selection.';
  }

  // quiet: a refresh of what is on screen, which stays until the new data
  // replaces it (no loading placeholders).
  async function load(quiet = false) {
    const worker = params.get('worker');
    const { from, to } = rangeParams(params);
    const type = params.get('type') || 'cpu';
    const [sk, sd] = (params.get('sort') || 'self:desc').split(':');
    const sort = { key: ['self', 'total', 'name'].includes(sk) ? sk : 'self', dir: sd === 'asc' ? 'asc' : 'desc' };
    // Controls follow the URL at once; data follows when it arrives.
    fillSelect(typeSel, TYPES, type);
    const preset = params.get('from') && params.get('to') ? 'custom' : params.get('range') || '1h';
    fillSelect(rangeSel, [...RANGES, ...(preset === 'custom' ? [['custom', 'brushed range']] : [])], preset);
    rangeText.textContent = preset === 'custom' ? rangeLabel(params) : '';
    const versions = params.getAll('version');
    // Live refresh only makes sense for a range that ends now.
    const live = params.get('live') === '1' && preset !== 'custom';
    liveBox.checked = live;
    liveBox.disabled = preset === 'custom';
    clearTimeout(liveTimer);
    if (live) liveTimer = setTimeout(() => { loaded = ''; load(true); }, LIVE_MS);
    const dataKey = JSON.stringify([worker, versions, params.get('host'), params.get('actor'), type, from, to, sort.key === 'total' ? 'total' : 'self']);
    if (dataKey === loaded) {
      // Only zoom, search or the table order changed (or back/forward).
      renderWorkers();
      if (topData) renderTop(topData, sort);
      const box = tid('flame', el);
      const zoom = params.get('zoom') || '';
      if (box && box.dataset.zoom !== undefined && box.dataset.zoom !== zoom) flame.fg.zoomToPath(zoom ? zoom.split(';') : []);
      return;
    }
    if (ctl) ctl.abort();
    ctl = new AbortController();
    const signal = ctl.signal;
    loaded = dataKey;
    try {
      setBusy('explore', 'Loading workers…');
      const w = await api('/api/v1/workers', { from, to }, { signal });
      workers = w.workers;
      renderWorkers();
      if (!worker) {
        setBusy('explore', null);
        if (workers.length > 0) {
          // Nothing chosen yet: open the worker seen last.
          const last = [...workers].sort((a, b) => b.last_ms - a.last_ms)[0];
          const p = new URLSearchParams(params);
          p.set('worker', last.worker);
          navigate('explore', p, null, { replace: true });
        } else {
          flame.show(null, { emptyText: 'Pick a worker on the left.' });
          tl.loading('No worker to show.');
        }
        return;
      }
      const entry = workers.find((x) => x.worker === worker) || { versions: [], hosts: [], actors: [] };
      fillSelect(versionSel, entry.versions, versions, 'all versions');
      versionSel.size = Math.min(4, versionSel.options.length);
      versionsShown = versions;
      fillSelect(hostSel, entry.hosts, params.get('host'), 'all hosts');
      fillSelect(actorSel, entry.actors, params.get('actor'), entry.actors.length ? 'all actors' : 'none');
      tid('explore-title').textContent = worker;
      const sel = { worker, host: params.get('host'), actor: params.get('actor') };
      const psel = { ...sel, version: versions, from, to, type };
      downloads.replaceChildren(...[['pprof', 'pprof', 'pb.gz'], ['folded', 'folded', 'folded'], ['speedscope', 'speedscope', 'speedscope.json']].map(([f, label, ext]) => downloadLink(`download-${f}`, label, apiUrl('/api/v1/profile', { ...psel, format: f }).toString(), `${worker}-${type}.${ext}`)));
      setBusy('explore', `Loading ${worker}…`);
      if (!quiet) {
        tl.loading('Loading the timeline…');
        flame.loading(`Loading the ${TYPES.find(([k]) => k === type)?.[1] ?? type} profile of ${worker} (${rangeLabel(params)})…`);
        topEmpty.hidden = false;
        topEmpty.textContent = 'Loading…';
        topTable.replaceChildren();
      }
      const [timelineData, tree, top] = await Promise.all([
        api('/api/v1/timeline', { ...sel, from, to, limit: 50 }, { signal }),
        api('/api/v1/profile', { ...psel, format: 'tree', max_nodes: MAX_NODES }, { signal }),
        api('/api/v1/profile', { ...psel, format: 'top', limit: 200, sort: sort.key === 'total' ? 'total' : 'self' }, { signal }),
      ]);
      tl.set(timelineData, versions);
      flame.show(tree, {
        zoom: params.get('zoom') || '', q: params.get('q') || '',
        emptyText: `No ${type} data for ${worker}${versions.length ? ' ' + versions.join(', ') : ''} in the ${rangeLabel(params)}.` + (type.startsWith('alloc') ? ' Allocation profiles come from memory sessions (Sessions tab).' : ''),
      });
      topData = top;
      renderTop(top, sort);
      setBusy('explore', null);
    } catch (e) {
      if (e.name === 'AbortError') return;
      loaded = ''; // let a retry load again
      setBusy('explore', null);
      flame.loading('Could not load the profile (see the message above).');
      tl.loading('Could not load the timeline.');
      showError(e);
    }
  }

  return {
    el,
    flame: flame,
    update(p) {
      params = p;
      load();
    },
    destroy() {
      if (ctl) ctl.abort();
      clearTimeout(liveTimer);
      setBusy('explore', null);
    },
  };
}

// ------------------------------------------------------------- compare --

// The largest changes in self share between the two sides of a diff tree.
function diffTable(tree) {
  const B = tree.base.total || 1, V = tree.vs.total || 1;
  const fns = new Map();
  const stack = [tree.root];
  while (stack.length) {
    const n = stack.pop();
    if (n !== tree.root) {
      const key = `${n.name}\u0000${n.module || ''}`;
      let f = fns.get(key);
      if (!f) fns.set(key, (f = { name: n.name, module: n.module, base: 0, vs: 0 }));
      f.base += n.base_self;
      f.vs += n.vs_self;
    }
    for (const c of n.children || []) stack.push(c);
  }
  const rows = [...fns.values()].map((f) => ({ ...f, a: f.base / B, b: f.vs / V, d: f.vs / V - f.base / B }));
  const worse = rows.filter((r) => r.d > 0.0005).sort((x, y) => y.d - x.d).slice(0, 15);
  const better = rows.filter((r) => r.d < -0.0005).sort((x, y) => x.d - y.d).slice(0, 15);
  return { worse, better };
}

function compareView() {
  let params = new URLSearchParams();
  let ctl = null;
  let loaded = '';
  let workers = [];
  const set = (changes, opts) => navigate('compare', withChanges(params, changes), null, opts);
  const workerSel = h('select', { testid: 'compare-worker' });
  const typeSel = h('select', { testid: 'compare-type' });
  const side = (k, label) => {
    const version = h('select', { testid: `compare-${k}-version` });
    const range = h('select', { testid: `compare-${k}-range` });
    version.addEventListener('change', () => set({ [`${k}.version`]: version.value, zoom: null }));
    range.addEventListener('change', () => {
      if (range.value !== 'brushed') set({ [`${k}.range`]: range.value, [`${k}.from`]: null, [`${k}.to`]: null, zoom: null });
    });
    return { version, range, el: h('fieldset', { class: `side side-${k}` }, h('legend', {}, label), h('label', {}, 'Version ', version), h('label', {}, 'Range ', range)) };
  };
  const A = side('a', 'A (base)'), B = side('b', 'B (compared)');
  // A timeline of the worker (all versions) over `range`; a drag sets the
  // range of the side chosen in `brushFor`, to compare two periods.
  const brushFor = h('select', { testid: 'compare-brush', title: 'What a drag on the timeline sets' }, option('a', 'sets A', true), option('b', 'sets B'));
  const tlRange = h('select', { testid: 'compare-range', title: 'Timeline range' });
  tlRange.addEventListener('change', () => set({ range: tlRange.value }));
  const tl = timeline((from, to) => {
    const k = brushFor.value;
    set({ [`${k}.from`]: from, [`${k}.to`]: to, zoom: null });
  }, 'drag to set the range of A or B (Brush)');
  workerSel.addEventListener('change', () => set({ worker: workerSel.value, 'a.version': null, 'b.version': null, zoom: null }));
  typeSel.addEventListener('change', () => set({ type: typeSel.value, zoom: null }));
  const flame = flamePanel('diff-flame', { searchId: 'diff-search', onState: (s) => set(s, { replace: true }) });
  const table = h('table', { class: 'diff-table', testid: 'diff-table' });
  const tableEmpty = h('div', { class: 'empty' }, 'Pick two selections.');
  const el = h('div', { class: 'compare' },
    h('div', { class: 'controls' }, h('h1', { class: 'title' }, 'Compare'), h('label', {}, 'Worker ', workerSel), h('label', {}, 'Type ', typeSel),
      h('label', {}, 'Timeline ', tlRange), h('label', {}, 'Brush ', brushFor)),
    tl.el,
    h('div', { class: 'sides' }, A.el, h('span', { class: 'vs' }, 'vs'), B.el,
      h('p', { class: 'hint legend-diff' }, h('span', { class: 'swatch worse' }), 'larger share in B ', h('span', { class: 'swatch better' }), 'smaller share in B · width: the larger of the two')),
    flame.el,
    h('section', { class: 'panel' }, h('div', { class: 'toolbar' }, h('strong', {}, 'Largest changes in self share'), h('span', { class: 'hint' }, ' (B − A, percentage points)')), tableEmpty, table));

  function renderTable(tree) {
    const { worse, better } = diffTable(tree);
    const row = (r, cls) => h('tr', { class: cls, onclick: () => { flame.search.value = r.name; flame.search.dispatchEvent(new Event('input')); } },
      h('td', { class: 'fn' }, r.name), h('td', { class: 'num' }, `${(100 * r.a).toFixed(2)}%`), h('td', { class: 'num' }, `${(100 * r.b).toFixed(2)}%`),
      h('td', { class: 'num delta' }, `${r.d > 0 ? '+' : ''}${(100 * r.d).toFixed(2)}`));
    table.replaceChildren(
      h('thead', {}, h('tr', {}, h('th', {}, 'Function'), h('th', {}, 'A self'), h('th', {}, 'B self'), h('th', {}, 'Change'))),
      h('tbody', { testid: 'regressions' }, h('tr', { class: 'group' }, h('th', { colspan: '4' }, `Regressions (${worse.length})`)), ...worse.map((r) => row(r, 'worse'))),
      h('tbody', { testid: 'improvements' }, h('tr', { class: 'group' }, h('th', { colspan: '4' }, `Improvements (${better.length})`)), ...better.map((r) => row(r, 'better'))));
    tableEmpty.hidden = worse.length + better.length > 0;
    tableEmpty.textContent = 'No function changed its share by more than 0.05 points.';
  }

  async function load() {
    const key = JSON.stringify(['worker', 'type', 'range', 'a.version', 'b.version', 'a.range', 'b.range', 'a.from', 'a.to', 'b.from', 'b.to'].map((k) => params.get(k)));
    if (key === loaded) return;
    if (ctl) ctl.abort();
    ctl = new AbortController();
    const signal = ctl.signal;
    loaded = key;
    const type = params.get('type') || 'cpu';
    fillSelect(typeSel, TYPES, type);
    for (const [s, k] of [[A, 'a'], [B, 'b']]) {
      const brushed = params.get(`${k}.from`) && params.get(`${k}.to`);
      fillSelect(s.range, [...RANGES, ...(brushed ? [['brushed', rangeLabel(params, `${k}.`)]] : [])], brushed ? 'brushed' : params.get(`${k}.range`) || params.get('range') || '1h');
    }
    fillSelect(tlRange, RANGES, params.get('range') || '1h');
    try {
      setBusy('compare', 'Loading workers…');
      const wideFrom = '-7d';
      workers = (await api('/api/v1/workers', { from: wideFrom, to: 'now' }, { signal })).workers;
      let worker = params.get('worker');
      fillSelect(workerSel, workers.map((w) => w.worker), worker, worker ? null : 'pick a worker');
      if (!worker) {
        setBusy('compare', null);
        flame.show(null, { emptyText: workers.length ? 'Pick a worker, then a version (or range) for A and for B.' : 'No worker sent profiles in the last 7 days.' });
        tableEmpty.hidden = false;
        table.replaceChildren();
        return;
      }
      const entry = workers.find((w) => w.worker === worker) || { versions: [] };
      const av = params.get('a.version'), bv = params.get('b.version');
      // Default: the two newest versions by name order, older as A.
      if (!av && !bv && entry.versions.length >= 2) {
        const p = new URLSearchParams(params);
        p.set('a.version', entry.versions[entry.versions.length - 2]);
        p.set('b.version', entry.versions[entry.versions.length - 1]);
        setBusy('compare', null);
        loaded = '';
        navigate('compare', p, null, { replace: true });
        return;
      }
      fillSelect(A.version, entry.versions, av, 'all versions');
      fillSelect(B.version, entry.versions, bv, 'all versions');
      const a = rangeParams(params, 'a.'), b = rangeParams(params, 'b.');
      const q = { worker, version: av, from: a.from, to: a.to, type, max_nodes: MAX_NODES, 'vs.from': b.from, 'vs.to': b.to };
      // vs.version defaults to the base's; "*" is all versions.
      if (bv) q['vs.version'] = bv;
      else if (av) q['vs.version'] = '*';
      setBusy('compare', `Comparing ${worker} ${av || 'all'} with ${bv || 'all'}…`);
      flame.loading('Loading the diff…');
      const tlSpan = rangeParams(params);
      const [tree, tlData] = await Promise.all([
        api('/api/v1/diff', q, { signal }),
        api('/api/v1/timeline', { worker, from: tlSpan.from, to: tlSpan.to, limit: 50 }, { signal }),
      ]);
      tl.set(tlData, []);
      const mark = (r, label, color) => { const [f, t] = rangeMsOf(r); return { from: f, to: t, label, color }; };
      tl.setMarks([mark(a, 'A', '#1f77b4'), mark(b, 'B', '#d62728')]);
      flame.show(tree, { zoom: params.get('zoom') || '', q: params.get('q') || '', emptyText: `Neither selection of ${worker} has ${type} data.` });
      renderTable(tree);
      setBusy('compare', null);
    } catch (e) {
      if (e.name === 'AbortError') return;
      loaded = '';
      setBusy('compare', null);
      flame.loading('Could not load the comparison (see the message above).');
      showError(e);
    }
  }
  return {
    el, flame,
    update(p) { params = p; load(); },
    destroy() { if (ctl) ctl.abort(); setBusy('compare', null); },
  };
}

// ------------------------------------------------------------ sessions --

const FINISHED = new Set(['done', 'failed', 'expired', 'cancelled']);

function sessionsView() {
  let current = null; // the session id shown
  let timer = null;
  let ctl = new AbortController();
  const kindSel = h('select', { testid: 'session-kind' }, option('worker', 'worker', true), option('actor', 'actor'));
  const nameIn = h('input', { testid: 'session-name', list: 'session-names', placeholder: 'worker or actor name', required: true, spellcheck: 'false' });
  const names = h('datalist', { id: 'session-names' });
  const typeSel = h('select', { testid: 'session-type' }, option('cpu', 'CPU', true), option('memory', 'memory (allocations)'));
  const durIn = h('input', { testid: 'session-duration', type: 'number', min: '1', max: '60000', step: '1', value: '5000', placeholder: '5000' });
  const hzIn = h('input', { testid: 'session-hz', type: 'number', min: '1', max: '1000', value: '1000', placeholder: '1000', title: 'CPU sampling rate' });
  const hzLabel = h('label', {}, 'Rate (Hz) ', hzIn);
  typeSel.addEventListener('change', () => { hzLabel.hidden = typeSel.value !== 'cpu'; });
  const startBtn = h('button', { type: 'submit', testid: 'session-start', class: 'primary' }, 'Start');
  const form = h('form', { class: 'session-form' },
    h('label', {}, 'Profile ', kindSel), nameIn, names, h('label', {}, 'Type ', typeSel),
    h('label', {}, 'Duration (ms) ', durIn), hzLabel, startBtn);
  const detail = h('section', { class: 'panel session-detail', testid: 'session-detail', hidden: true });
  const list = h('table', { class: 'sessions', testid: 'session-list' });
  const listEmpty = h('div', { class: 'empty' }, 'Loading sessions…');
  const flame = flamePanel('session-flame', { searchId: 'session-search' });
  flame.el.hidden = true;
  const el = h('div', { class: 'sessions-view' },
    h('div', { class: 'controls' }, h('h1', { class: 'title' }, 'On-demand sessions'),
      h('p', { class: 'hint' }, 'Profiles the next few seconds of a worker (every host running it) or of one actor, at up to 1000 Hz, or its allocations.')),
    form, detail, flame.el,
    h('section', { class: 'panel' }, h('div', { class: 'toolbar' }, h('strong', {}, 'Recent sessions')), listEmpty, list));

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const body = { [kindSel.value]: nameIn.value.trim(), type: typeSel.value };
    // Empty fields are left out: the server's defaults apply (5000 ms, 1000 Hz).
    if (durIn.value.trim()) body.duration_ms = Number(durIn.value);
    if (typeSel.value === 'cpu' && hzIn.value.trim()) body.hz = Number(hzIn.value);
    startBtn.disabled = true;
    try {
      setBusy('sessions', 'Starting the session…');
      const doc = await api('/api/v1/sessions', null, { method: 'POST', body });
      clearError();
      navigate('sessions', new URLSearchParams(), doc.id);
    } catch (e) {
      showError(e);
    } finally {
      setBusy('sessions', null);
      startBtn.disabled = false;
    }
  });

  const sessionTarget = (s) => (s.actor ? `actor ${s.actor}` : `worker ${s.worker}`) + (s.version ? ` ${s.version}` : '') + (s.host ? ` on ${s.host}` : '');

  function renderList(sessions) {
    list.replaceChildren(
      h('thead', {}, h('tr', {}, ...['Started', 'Target', 'Type', 'Duration', 'State', 'Samples'].map((t) => h('th', {}, t)))),
      h('tbody', {}, ...sessions.map((s) => h('tr', {
        class: s.id === current ? 'selected' : null, 'data-id': s.id, tabindex: '0',
        onclick: () => navigate('sessions', new URLSearchParams(), s.id),
      }, h('td', {}, fmtDateTime.format(s.created_ms)), h('td', {}, sessionTarget(s)), h('td', {}, s.type),
      h('td', { class: 'num' }, `${(s.duration_ms / 1000).toFixed(1)} s`), h('td', { class: `state ${s.state}` }, s.state),
      h('td', { class: 'num' }, String(s.samples))))));
    listEmpty.hidden = sessions.length > 0;
    listEmpty.textContent = 'No session yet: start one above.';
  }

  function renderDetail(s) {
    detail.hidden = false;
    const pct = Math.round(100 * (s.progress || 0));
    const cancel = !FINISHED.has(s.state) && !s.cancel_requested
      ? h('button', { type: 'button', testid: 'session-cancel', onclick: async () => {
        try { renderDetail(await api(`/api/v1/sessions/${s.id}/cancel`, null, { method: 'POST' })); } catch (e) { showError(e); }
      } }, 'Cancel') : null;
    const links = s.result ? [['pprof', 'pb.gz'], ['folded', 'folded'], ['speedscope', 'speedscope.json']].map(([f, ext]) => downloadLink(`dl-${f}`, f, s.result[f], `ember-session-${s.id.slice(0, 8)}.${ext}`)) : [];
    detail.replaceChildren(
      h('div', { class: 'toolbar' }, h('strong', {}, `Session ${s.id.slice(0, 8)}`), h('span', {}, ` ${sessionTarget(s)} · ${s.type} · ${(s.duration_ms / 1000).toFixed(1)} s` + (s.type === 'cpu' ? ` at ${s.hz} Hz` : '')), h('span', { class: 'spacer' }), ...links, cancel),
      h('div', { class: 'progress-row' },
        h('span', { class: `state ${s.state}`, testid: 'session-state' }, s.state + (s.cancel_requested && !FINISHED.has(s.state) ? ' (cancelling)' : '')),
        h('progress', { max: '100', value: String(pct), testid: 'session-progress' }),
        h('span', {}, `${pct}% · ${s.targets} target${s.targets === 1 ? '' : 's'} · ${s.samples} samples · started ${fmtTime.format(s.started_ms || s.created_ms)}`)),
      h('table', { class: 'hosts' }, h('thead', {}, h('tr', {}, ...['Host', 'State', 'Pids', 'Samples', 'Message'].map((t) => h('th', {}, t)))),
        h('tbody', {}, ...s.hosts.map((x) => h('tr', {}, h('td', {}, x.host), h('td', { class: `state ${x.state}` }, x.state), h('td', {}, (x.pids || []).join(' ')), h('td', { class: 'num' }, String(x.samples)), h('td', {}, x.message || ''))))));
  }

  async function refreshList() {
    try {
      renderList((await api('/api/v1/sessions', null, { signal: ctl.signal })).sessions);
    } catch (e) {
      showError(e);
    }
  }

  async function poll(id) {
    clearTimeout(timer);
    if (id !== current) return;
    try {
      const s = await api(`/api/v1/sessions/${encodeURIComponent(id)}`, null, { signal: ctl.signal });
      if (id !== current) return;
      renderDetail(s);
      if (!FINISHED.has(s.state)) {
        setBusy('sessions', `Session ${s.state}: ${Math.round(100 * s.progress)}%`);
        timer = setTimeout(() => poll(id), 500);
        return;
      }
      setBusy('sessions', null);
      refreshList();
      if (s.result) {
        flame.el.hidden = false;
        flame.loading('Loading the result…');
        const tree = await api(s.result.tree, { max_nodes: MAX_NODES }, { signal: ctl.signal });
        if (id === current) {
          flame.show(tree, {
            emptyText: s.type === 'memory'
              ? 'The session finished with no allocation sampled (did the target allocate in that window?).'
              : 'The session finished with no samples (was the target on a CPU in that window?).',
          });
        }
      } else {
        flame.el.hidden = true;
      }
    } catch (e) {
      setBusy('sessions', null);
      showError(e);
    }
  }

  async function loadNames() {
    try {
      const w = await api('/api/v1/workers', { from: '-1h', to: 'now' }, { signal: ctl.signal });
      const seen = new Set();
      names.replaceChildren();
      for (const x of w.workers) {
        for (const v of [x.worker, ...x.actors]) {
          if (seen.has(v)) continue;
          seen.add(v);
          names.append(option(v, x.worker === v ? 'worker' : `actor of ${x.worker}`));
        }
      }
    } catch (e) {
      showError(e);
    }
  }
  loadNames();

  return {
    el, flame,
    update(_p, arg) {
      if (arg === current && arg) return;
      current = arg;
      clearTimeout(timer);
      flame.el.hidden = true;
      detail.hidden = !arg;
      refreshList();
      if (arg) {
        detail.replaceChildren(h('div', { class: 'empty' }, 'Loading the session…'));
        poll(arg);
      }
    },
    destroy() {
      clearTimeout(timer);
      ctl.abort();
      ctl = new AbortController();
      setBusy('sessions', null);
    },
  };
}

// ---------------------------------------------------------------- main --

const views = { explore: exploreView, compare: compareView, sessions: sessionsView };
let mounted = null; // {name, view}

// Where each view was last, so the tabs return to it; a view not opened yet
// gets the worker (and range) of the one in use.
const lastHash = {};

function onNav(ev) {
  const to = ev.currentTarget.dataset.view;
  ev.preventDefault();
  if (lastHash[to]) {
    history.pushState(null, '', lastHash[to]);
    route();
    return;
  }
  const { params } = parseHash();
  const carry = new URLSearchParams();
  if (to !== 'sessions') for (const k of ['worker', 'range', 'type']) if (params.get(k)) carry.set(k, params.get(k));
  navigate(to, carry, null);
}

function route() {
  const { view, arg, params } = parseHash();
  const name = views[view] ? view : 'explore';
  lastHash[name] = location.hash;
  if (!mounted || mounted.name !== name) {
    if (mounted) mounted.view.destroy();
    const v = views[name]();
    mounted = { name, view: v };
    $('#view').replaceChildren(v.el);
    for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', a.dataset.view === name);
    document.title = `Ember · ${name[0].toUpperCase()}${name.slice(1)}`;
  }
  activeFlame = mounted.view.flame;
  mounted.view.update(params, arg);
}

function init() {
  tid('tz').textContent = `times in ${TZ}`;
  $('.close', tid('error')).addEventListener('click', clearError);
  $('#token-button').addEventListener('click', askToken);
  $('#token-dialog').addEventListener('close', () => {
    const d = $('#token-dialog');
    if (d.returnValue !== 'ok') return;
    const t = $('input', d).value.trim();
    if (t) localStorage.setItem(TOKEN_KEY, t);
    else localStorage.removeItem(TOKEN_KEY);
    clearError();
    if (mounted) mounted.view.destroy();
    mounted = null;
    route();
  });
  // Keyboard: "/" searches the flamegraph in view, Esc resets its zoom.
  document.addEventListener('keydown', (ev) => {
    const typing = ev.target instanceof HTMLElement && ev.target.matches('input, select, textarea');
    if (ev.key === '/' && !typing && activeFlame) {
      ev.preventDefault();
      activeFlame.search.focus();
      activeFlame.search.select();
    } else if (ev.key === 'Escape' && activeFlame) {
      if (typing) ev.target.blur();
      if (ev.target === activeFlame.search && activeFlame.search.value) {
        // Esc in the search box clears the search (and its URL state).
        activeFlame.search.value = '';
        activeFlame.search.dispatchEvent(new Event('input'));
      }
      activeFlame.fg.resetZoom();
    }
  });
  for (const a of document.querySelectorAll('nav a')) a.addEventListener('click', onNav);
  window.addEventListener('popstate', route);
  window.addEventListener('hashchange', route);
  window.addEventListener('unhandledrejection', (ev) => showError(ev.reason));
  route();
}

init();

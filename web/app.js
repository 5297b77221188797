// Ember's dashboard: Explore (history of a worker: timeline, flamegraph,
// top functions), Compare (two selections as a differential flamegraph),
// Sessions (on-demand profiles) and Alerts (web/alerts.js: alerts and
// rules). Plain ES modules, no framework and no build step: the collector
// serves these files from its binary (docs/internals/dashboard.md). All
// data comes from /api/v1 (docs/api.md). The parts every view shares (DOM,
// API client, router helpers, flamegraph panel, timeline) are in web/ui.js.
//
// State lives in the URL hash (#/explore?worker=api&range=1h...), so a link
// reproduces a view; every API error is shown in the banner, and every
// panel says when it is loading or empty.
import { alertMarks, alertsView, openAlert } from './alerts.js';
import { formatValue } from './flame.js';
import {
  $, FINISHED, MAX_NODES, RANGES, TYPES, TZ, ago, api, apiUrl, askToken, clearError, downloadLink,
  fillSelect, flamePanel, fmtDateTime, fmtTime, h, navigate, onNavigate, option, parseHash,
  rangeLabel, rangeMsOf, rangeParams, setBusy, showError, tid, timeline, withChanges, TOKEN_KEY,
} from './ui.js';

// The flamegraph of the visible view, for the keyboard shortcuts.
let activeFlame = null;

// ------------------------------------------------------------- explore --

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
  // Heap growth (the leak finder, /api/v1/heap/growth): shown with the
  // in-use types, from the range's start to its end.
  const growthTable = h('table', { class: 'top', testid: 'growth-table' });
  const growthEmpty = h('div', { class: 'empty' });
  const growthPanel = h('section', { class: 'panel', testid: 'growth-panel', hidden: true },
    h('div', { class: 'toolbar' }, h('strong', {}, 'Heap growth'), h('span', { class: 'hint' }, ' in-use bytes at the start and the end of the range, allocation sites that grew first')),
    growthEmpty, h('div', { class: 'top-panel' }, growthTable));

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
      h('section', { class: 'panel' }, h('div', { class: 'toolbar' }, h('strong', {}, 'Top functions'), h('span', { class: 'hint' }, ' click a row to find it in the flamegraph')), topEmpty, h('div', { class: 'top-panel' }, topTable)),
      growthPanel));

  function renderGrowth(g) {
    growthPanel.hidden = g === null;
    if (g === null) return;
    const rate = (v) => `${v >= 0 ? '+' : '−'}${formatValue(Math.abs(Math.round(v)), 'bytes')}/s`;
    growthTable.replaceChildren(
      h('thead', {}, h('tr', {}, ...['Function', 'Bytes then', 'Bytes now', 'Growth/s'].map((t) => h('th', {}, t)))),
      h('tbody', {}, ...g.functions.map((f) => h('tr', {
        title: f.module || '', onclick: () => { flame.search.value = f.function; flame.search.dispatchEvent(new Event('input')); },
      }, h('td', { class: 'fn' }, f.function, f.module ? h('span', { class: 'module' }, ` ${f.module.split('/').pop()}`) : null),
      h('td', { class: 'num' }, formatValue(f.bytes_from, 'bytes')),
      h('td', { class: 'num' }, formatValue(f.bytes_to, 'bytes')),
      h('td', { class: 'num' }, rate(f.per_second))))));
    growthEmpty.hidden = g.functions.length > 0;
    growthEmpty.textContent = 'No in-use memory at the end of this range.';
  }

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
      // The growth endpoint takes one version at most: with several, none.
      const heap = type.startsWith('inuse');
      const growthSel = { ...sel, version: versions.length === 1 ? versions[0] : null, from, to, limit: 50 };
      const [timelineData, tree, top, marks, growth] = await Promise.all([
        // The in-use types draw the heap over time (a snapshot per bucket),
        // the others CPU.
        heap ? api('/api/v1/heap/timeline', { ...sel, version: versions, from, to, type, group_by: 'version' }, { signal })
          : api('/api/v1/timeline', { ...sel, from, to, limit: 50 }, { signal }),
        api('/api/v1/profile', { ...psel, format: 'tree', max_nodes: MAX_NODES }, { signal }),
        api('/api/v1/profile', { ...psel, format: 'top', limit: 200, sort: sort.key === 'total' ? 'total' : 'self' }, { signal }),
        // The worker's alerts, marked on the timeline; without them the
        // profile is still worth showing.
        alertMarks({ ...sel, version: versions }, ...rangeMsOf({ from, to }), signal).catch((e) => {
          if (e.name === 'AbortError') throw e;
          showError(e);
          return [];
        }),
        heap ? api('/api/v1/heap/growth', growthSel, { signal }) : null,
      ]);
      if (heap) tl.setHeap(timelineData, versions);
      else tl.set(timelineData, versions);
      tl.setAlerts(marks, (al) => openAlert(al.id));
      flame.show(tree, {
        zoom: params.get('zoom') || '', q: params.get('q') || '',
        emptyText: `No ${type} data for ${worker}${versions.length ? ' ' + versions.join(', ') : ''} in the ${rangeLabel(params)}.` + (type.startsWith('alloc') ? ' Allocation profiles come from memory sessions (Sessions tab).' : ''),
      });
      topData = top;
      renderTop(top, sort);
      renderGrowth(growth);
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

const views = { explore: exploreView, compare: compareView, sessions: sessionsView, alerts: alertsView };
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
  if (to === 'explore' || to === 'compare') for (const k of ['worker', 'range', 'type']) if (params.get(k)) carry.set(k, params.get(k));
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
  onNavigate(route);
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

// The Alerts view: the alerts (#/alerts, firing first), one alert
// (#/alerts/ID: its CPU timeline with the threshold and the spike, the diff
// flamegraph of the spike against the ten minutes before it, what changed,
// the flamegraph of the session it captured) and the rule editor
// (#/alerts?tab=rules). Also what Explore needs to mark alerts on its
// timeline (alertMarks). Data: /api/v1/alerts, /api/v1/rules (docs/api.md,
// docs/internals/alerts.md), and the timeline, diff and session endpoints
// the other views use.
//
// An alert's selection is its labels (the worker and the rule's group)
// plus the exact labels its rule asks for; its spike is [started,
// resolved or now), its baseline the ten minutes before started.
import {
  ALERT_COLORS, FINISHED, MAX_NODES, api, clearError, fmtDateTime, fmtTime, flamePanel, h, hashOf,
  navigate, option, setBusy, showError, timeline, withChanges,
} from './ui.js';

// The diff's baseline: this long before the spike (a baseline rule's own
// period), as the engine computes `top`.
const BASELINE_MS = 10 * 60e3;
const LIST_EVERY_MS = 10000; // the list reloads itself this often
const DETAIL_EVERY_MS = 5000; // an alert not resolved reloads this often
const CAPTURE_EVERY_MS = 1000; // a capture session not finished, this often

// Unix seconds for the API and for links (Explore's from/to are whole seconds).
const secDown = (ms) => String(Math.floor(ms / 1000));
const secUp = (ms) => String(Math.ceil(ms / 1000));

// A duration as the API writes it ("90s", "10m", "1h") in ms; null if not one.
function durationMs(text) {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/.exec(String(text ?? '').trim());
  return m ? Number(m[1]) * { ms: 1, s: 1e3, m: 60e3, h: 3600e3, d: 86400e3 }[m[2]] : null;
}

const baselineMs = (a, rule) => (a.kind === 'baseline' && durationMs(rule?.baseline?.period)) || BASELINE_MS;

export function fmtDuration(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 90) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min${s % 60 ? ` ${s % 60} s` : ''}`;
  const hr = Math.floor(m / 60);
  if (hr < 48) return `${hr} h${m % 60 ? ` ${m % 60} min` : ''}`;
  return `${Math.floor(hr / 24)} d${hr % 24 ? ` ${hr % 24} h` : ''}`;
}

// "0.98 cores (threshold 0.5)"; a function rule's values are percents of
// the worker's CPU.
function fmtAmount(v, unit) {
  if (typeof v !== 'number' || !Number.isFinite(v)) return '–';
  return unit === 'percent' ? `${v.toFixed(v >= 10 ? 1 : 2)}%` : `${v.toFixed(v >= 10 ? 1 : 2)} cores`;
}
const unitOf = (a) => a.unit || (a.kind === 'function' ? 'percent' : 'cores');
const fmtShare = (x) => (typeof x === 'number' ? `${(100 * x).toFixed(1)}%` : '–');
const fmtDelta = (x) => (typeof x === 'number' ? `${x >= 0 ? '+' : ''}${(100 * x).toFixed(1)}` : '–');
const endOf = (a) => a.resolved ?? Date.now();

function labelsText(labels) {
  return Object.entries(labels || {}).map(([k, v]) => `${k}=${v}`).join(' ');
}

function badge(state, testid = 'alert-state') {
  return h('span', { class: `badge ${state}`, testid }, state);
}

// The labels to ask the store for: the alert's own, and the exact ones its
// rule selects by (a rule for version 2.0 with no group_by has no version
// label on its alerts).
function selectionOf(alert, rule) {
  const l = alert.labels || {};
  const sel = { worker: l.worker, version: l.version, host: l.host, actor: l.actor };
  for (const k of ['version', 'host', 'actor']) if (!sel[k] && rule && rule[k]) sel[k] = rule[k];
  return sel;
}

// The condition of a rule in words.
function conditionOf(r) {
  if (r.above !== undefined) return `above ${r.above} cores`;
  if (r.baseline) {
    const b = r.baseline;
    return `above ${b.factor}× its median over ${b.period || '1h'} (floor ${b.floor ?? 0.1} cores)`;
  }
  if (r.function) return `${r.function.name} above ${r.function.percent}% of the worker's CPU`;
  return '?';
}

function selectsOf(r) {
  const parts = [`worker ${r.worker}`];
  for (const k of ['version', 'host', 'actor']) if (r[k]) parts.push(`${k} ${r[k]}`);
  if (r.group_by) parts.push(`one alert per ${r.group_by}`);
  return parts.join(' · ');
}

// ---------------------------------------------------- Explore's markers --

// The alerts of `worker` that overlap [fromMs, toMs) and agree with the
// selection's other labels, as timeline.setAlerts() takes them.
export async function alertMarks(sel, fromMs, toMs, signal) {
  const { alerts } = await api('/api/v1/alerts', { worker: sel.worker }, { signal });
  return alerts
    .filter((a) => a.started < toMs && endOf(a) >= fromMs)
    .filter((a) => ['host', 'actor'].every((k) => !sel[k] || !a.labels?.[k] || a.labels[k] === sel[k]))
    .filter((a) => !sel.version || sel.version.length === 0 || !a.labels?.version || sel.version.includes(a.labels.version))
    .map((a) => ({
      id: a.id, label: a.rule, state: a.state, from: a.started, to: endOf(a),
      href: hashOf('alerts', new URLSearchParams(), a.id),
    }));
}

export function openAlert(id) {
  navigate('alerts', new URLSearchParams(), id);
}

// ------------------------------------------------------------ the view --

export function alertsView() {
  let params = new URLSearchParams();
  let current = null; // the alert id shown
  let listCtl = new AbortController();
  let detailCtl = new AbortController();
  let listTimer = null, detailTimer = null, captureTimer = null;
  let listKey = '';
  let rules = null; // the last GET /api/v1/rules answer's rules
  const set = (changes, opts) => navigate('alerts', withChanges(params, changes), current, opts);

  // Tabs.
  const tabAlerts = h('a', { class: 'tab', testid: 'tab-alerts', href: '#/alerts', role: 'tab' }, 'Alerts');
  const tabRules = h('a', { class: 'tab', testid: 'tab-rules', href: '#/alerts?tab=rules', role: 'tab' }, 'Rules');
  tabAlerts.addEventListener('click', (ev) => { ev.preventDefault(); navigate('alerts', withChanges(params, { tab: null }), current); });
  tabRules.addEventListener('click', (ev) => { ev.preventDefault(); navigate('alerts', withChanges(params, { tab: 'rules' }), null); });

  // The list and its filters.
  const stateSel = h('select', { testid: 'alert-filter-state', title: 'State' },
    option('', 'any state'), ...['firing', 'pending', 'resolved'].map((s) => option(s, s)));
  const ruleSel = h('select', { testid: 'alert-filter-rule', title: 'Rule' }, option('', 'any rule'));
  const workerIn = h('input', { type: 'search', testid: 'alert-filter-worker', placeholder: 'worker', spellcheck: 'false', size: '14', title: 'Only the alerts of this worker (Enter)' });
  stateSel.addEventListener('change', () => set({ state: stateSel.value }));
  ruleSel.addEventListener('change', () => set({ rule: ruleSel.value }));
  workerIn.addEventListener('change', () => set({ worker: workerIn.value.trim() }));
  const refreshBtn = h('button', { type: 'button', testid: 'alerts-refresh', title: 'Load again' }, 'Refresh');
  refreshBtn.addEventListener('click', () => { listKey = ''; loadList(); if (current) loadDetail(current, true); });
  const list = h('table', { class: 'alerts', testid: 'alert-list' });
  const listEmpty = h('div', { class: 'empty' }, 'Loading alerts…');
  const listPanel = h('section', { class: 'panel' },
    h('div', { class: 'toolbar' }, h('strong', {}, 'Alerts'), h('span', { class: 'hint' }, ' firing first, then newest'),
      h('span', { class: 'spacer' }), h('label', {}, 'State ', stateSel), h('label', {}, 'Rule ', ruleSel),
      h('label', {}, 'Worker ', workerIn), refreshBtn),
    listEmpty, list);

  // One alert.
  const detailHead = h('div', { class: 'alert-head' });
  const tl = timeline(null, 'the spike shaded, the threshold dashed', { testid: 'alert-timeline' });
  const diff = flamePanel('alert-diff-flame', { searchId: 'alert-diff-search' });
  const diffTitle = h('div', { class: 'toolbar' }, h('strong', {}, 'What changed'),
    h('span', { class: 'hint', testid: 'alert-diff-range' }, ''),
    h('span', { class: 'spacer' }),
    h('span', { class: 'hint legend-diff' }, h('span', { class: 'swatch worse' }), 'larger share in the spike ', h('span', { class: 'swatch better' }), 'smaller'));
  const top = h('table', { class: 'diff-table', testid: 'alert-top' });
  const topEmpty = h('div', { class: 'empty' }, 'The alert names no function.');
  const capHead = h('div', { class: 'toolbar', testid: 'alert-capture' });
  const capture = flamePanel('alert-capture-flame', { searchId: 'alert-capture-search' });
  const capEmpty = h('div', { class: 'empty', testid: 'alert-capture-empty' }, 'No capture.');
  const detail = h('section', { class: 'alert-detail', testid: 'alert-detail', hidden: true },
    detailHead, tl.el,
    h('section', { class: 'panel' }, diffTitle,
      h('div', { class: 'top-panel' }, top), topEmpty),
    diff.el,
    h('section', { class: 'panel' }, capHead, capEmpty), capture.el);
  capture.el.hidden = true;

  // The rule editor.
  const editor = ruleEditor({
    onChange: () => { rulesLoaded(null); },
  });

  const alertsTab = h('div', { class: 'alerts-tab', role: 'tabpanel' }, detail, listPanel);
  const el = h('div', { class: 'alerts-view' },
    h('div', { class: 'controls' }, h('h1', { class: 'title' }, 'Alerts'),
      h('nav', { class: 'tabs', role: 'tablist' }, tabAlerts, tabRules),
      h('p', { class: 'hint' }, 'Rules watch the CPU of workers; an alert keeps the profile of its spike and, when its rule asks, a high-resolution capture.')),
    alertsTab, editor.el);

  // The rules feed the list's rule filter and the alerts' selections;
  // null: load them again.
  async function rulesLoaded(answer) {
    try {
      rules = answer ? answer.rules : (await api('/api/v1/rules', null, { signal: listCtl.signal })).rules;
    } catch (e) {
      showError(e);
      return;
    }
    syncRuleSel();
    editor.render(rules);
  }

  function syncRuleSel() {
    const chosen = params.get('rule') || '';
    ruleSel.replaceChildren(option('', 'any rule', !chosen), ...(rules || []).map((r) => option(r.name, r.name, r.name === chosen)));
    if (chosen && !(rules || []).some((r) => r.name === chosen)) ruleSel.append(option(chosen, `${chosen} (deleted)`, true));
  }

  function renderList(alerts) {
    const now = Date.now();
    list.replaceChildren(
      h('thead', {}, h('tr', {}, ...['State', 'Rule', 'Labels', 'Value / threshold', 'Started', 'Duration', 'Top function'].map((t) => h('th', {}, t)))),
      h('tbody', {}, ...alerts.map((a) => {
        const t = a.top && a.top[0];
        return h('tr', {
          testid: 'alert-row', class: a.id === current ? 'selected' : null, tabindex: '0',
          'data-id': a.id, 'data-rule': a.rule, 'data-state': a.state,
          onclick: () => navigate('alerts', withChanges(params, {}), a.id),
          onkeydown: (ev) => { if (ev.key === 'Enter') ev.currentTarget.click(); },
        },
        h('td', {}, badge(a.state)), h('td', {}, a.rule), h('td', { class: 'labels' }, labelsText(a.labels)),
        h('td', { class: 'num', testid: 'alert-value' }, `${fmtAmount(a.value, unitOf(a)).replace(/ cores$|%$/, '')} / ${fmtAmount(a.threshold, unitOf(a))}`),
        h('td', {}, fmtDateTime.format(a.started)),
        h('td', { class: 'num' }, fmtDuration((a.resolved ?? now) - a.started)),
        h('td', { class: 'fn' }, t ? t.function : '–'));
      })));
    const filtered = ['state', 'rule', 'worker'].some((k) => params.get(k));
    listEmpty.hidden = alerts.length > 0;
    listEmpty.textContent = filtered
      ? 'No alert matches these filters.'
      : 'No alert yet. A rule (Rules tab) fires when its selection breaches it for its whole "for".';
    const firing = alerts.filter((a) => a.state === 'firing').length;
    tabAlerts.textContent = firing && !filtered ? `Alerts (${firing} firing)` : 'Alerts';
  }

  async function loadList() {
    clearTimeout(listTimer);
    const q = { state: params.get('state'), rule: params.get('rule'), worker: params.get('worker') };
    const key = JSON.stringify(q);
    const quiet = key === listKey;
    listKey = key;
    if (!quiet) setBusy('alerts', 'Loading alerts…');
    try {
      const { alerts } = await api('/api/v1/alerts', q, { signal: listCtl.signal });
      renderList(alerts);
    } catch (e) {
      if (e.name === 'AbortError') return;
      listKey = '';
      listEmpty.hidden = false;
      listEmpty.textContent = 'Could not load the alerts (see the message above).';
      showError(e);
    } finally {
      if (!quiet) setBusy('alerts', null);
    }
    listTimer = setTimeout(loadList, LIST_EVERY_MS);
  }

  // ---- one alert

  let shown = null; // {id, diffKey, capKey}: what the detail's parts were loaded for

  const ruleOf = (a) => (rules || []).find((r) => r.name === a.rule);

  function renderHead(a) {
    const unit = unitOf(a);
    const sel = selectionOf(a, ruleOf(a));
    const explore = withChanges(new URLSearchParams(), {
      worker: sel.worker, host: sel.host, actor: sel.actor, version: sel.version,
      from: secDown(a.started - baselineMs(a, ruleOf(a))), to: secUp(endOf(a) + 60e3), range: '1h',
    });
    const times = [['started', a.started], ['fired', a.fired], ['resolved', a.resolved]]
      .filter(([, t]) => t).map(([k, t]) => `${k} ${fmtDateTime.format(t)}`);
    detailHead.replaceChildren(
      h('div', { class: 'toolbar' },
        badge(a.state, 'alert-detail-state'),
        h('strong', { testid: 'alert-detail-rule' }, a.rule),
        h('span', { class: 'labels' }, labelsText(a.labels)),
        h('span', { testid: 'alert-detail-value' }, `${fmtAmount(a.value, unit)} against a threshold of ${fmtAmount(a.threshold, unit)}` +
          (a.kind ? ` (${a.kind})` : '')),
        h('span', { class: 'spacer' }),
        h('a', { class: 'button', href: hashOf('explore', explore), testid: 'alert-explore' }, 'Open in Explore'),
        h('a', { class: 'button', href: hashOf('alerts', withChanges(params, {})), title: 'Close (back to the list)' }, 'Close')),
      h('div', { class: 'alert-times hint' }, `${times.join(' · ')} · ${a.resolved ? 'lasted' : 'for'} ${fmtDuration(endOf(a) - a.started)}` +
        ` · alert ${a.id}`));
  }

  function renderTop(a) {
    const rows = a.top || [];
    top.replaceChildren(
      h('thead', {}, h('tr', {}, h('th', {}, 'Function'), h('th', {}, 'Baseline self'), h('th', {}, 'Spike self'), h('th', {}, 'Change (points)'))),
      h('tbody', {}, ...rows.map((f) => h('tr', {
        class: f.delta > 0 ? 'worse' : f.delta < 0 ? 'better' : null, tabindex: '0', title: 'Find it in the flamegraph',
        onclick: () => { diff.search.value = f.function; diff.search.dispatchEvent(new Event('input')); diff.el.scrollIntoView({ block: 'nearest' }); },
        onkeydown: (ev) => { if (ev.key === 'Enter') ev.currentTarget.click(); },
      }, h('td', { class: 'fn' }, f.function, (f.module || f.file) ? h('span', { class: 'module' }, ` ${String(f.module || f.file).split('/').pop()}`) : null),
      h('td', { class: 'num' }, fmtShare(f.baseline)), h('td', { class: 'num' }, fmtShare(f.spike)),
      h('td', { class: 'num delta' }, fmtDelta(f.delta))))));
    topEmpty.hidden = rows.length > 0;
  }

  async function loadTimeline(a, sel, signal) {
    const from = a.started - baselineMs(a, ruleOf(a));
    const to = a.resolved ? a.resolved + 2 * 60e3 : Date.now() + 20e3;
    const data = await api('/api/v1/timeline', { ...sel, from: secDown(from), to: secUp(to), limit: 50 }, { signal });
    tl.set(data, []);
    tl.setMarks([
      { from, to: a.started, label: 'baseline', color: '#1f77b4' },
      { from: a.started, to: endOf(a), label: 'spike', color: ALERT_COLORS.firing },
    ]);
    // A function rule's threshold is a share, not cores: nothing to draw.
    if (unitOf(a) === 'cores') tl.setThreshold(a.threshold, `threshold ${a.threshold} cores`);
    else tl.setThreshold(null);
  }

  async function loadDiff(a, sel, signal) {
    const base = baselineMs(a, ruleOf(a));
    const q = {
      ...sel, type: 'cpu', max_nodes: MAX_NODES,
      from: secDown(a.started - base), to: secDown(a.started),
      'vs.from': secDown(a.started), 'vs.to': secUp(endOf(a)),
    };
    diffTitle.querySelector('[data-testid="alert-diff-range"]').textContent =
      ` the spike (${fmtTime.format(a.started)} – ${a.resolved ? fmtTime.format(a.resolved) : 'now'}) against the ${fmtDuration(base)} before it`;
    diff.loading('Loading the diff…');
    const tree = await api('/api/v1/diff', q, { signal });
    diff.show(tree, { emptyText: `No CPU profile of ${labelsText(sel)} around the spike.` });
  }

  // The capture: the session's own state while it runs, then its flamegraph.
  async function loadCapture(a, signal) {
    clearTimeout(captureTimer);
    const c = a.capture;
    if (!c || !c.session) {
      // No session: the rule asks for none, or the engine did not start
      // one (cooldown, cap, no isolate) and says why.
      capHead.replaceChildren(h('strong', {}, 'Capture'), h('span', { class: 'hint', testid: 'alert-capture-state' }, c && c.state ? ` ${c.state}` : ''));
      capEmpty.hidden = false;
      capEmpty.textContent = c ? `No capture session${c.error ? `: ${c.error}` : ` (${c.state})`}.` : 'No capture: the rule asks for none.';
      capture.el.hidden = true;
      return;
    }
    let s = null;
    try {
      s = await api(`/api/v1/sessions/${encodeURIComponent(c.session)}`, null, { signal });
    } catch (e) {
      // Sessions live in the memory of the collector that ran them; the
      // result outlives them (served from the store), so go on with the
      // state the alert recorded.
      if (e.name === 'AbortError') throw e;
      if (e.status !== 404) showError(e);
    }
    const state = s ? s.state : c.state;
    capHead.replaceChildren(h('strong', {}, 'Capture'),
      h('span', {}, ' session '), h('a', { href: hashOf('sessions', new URLSearchParams(), c.session), testid: 'alert-capture-link' }, c.session.slice(0, 8)),
      h('span', { class: `state ${state}`, testid: 'alert-capture-state' }, ` ${state}`),
      s ? h('span', { class: 'hint' }, ` · ${s.type} · ${(s.duration_ms / 1000).toFixed(1)} s` + (s.type === 'cpu' ? ` at ${s.hz} Hz` : '') + ` · ${s.samples} samples`) : null);
    if (!s && !FINISHED.has(state)) {
      // The collector forgot the session (a restart) before it finished as
      // far as the alert knows: its result, if any, is in the store.
      try {
        const tree = await api(`/api/v1/sessions/${encodeURIComponent(c.session)}/profile`, { format: 'tree', max_nodes: MAX_NODES }, { signal });
        capEmpty.hidden = true;
        capture.el.hidden = false;
        capture.show(tree, { emptyText: 'The capture finished with no samples (was the worker on a CPU then?).' });
      } catch (e) {
        if (e.name === 'AbortError') throw e;
        capEmpty.hidden = false;
        capEmpty.textContent = `The capture session is no longer known here and left no profile (${e.message}).`;
        capture.el.hidden = true;
      }
      return;
    }
    if (!FINISHED.has(state)) {
      capEmpty.hidden = false;
      capEmpty.textContent = `The capture is ${state}; its flamegraph follows when it is done.`;
      capture.el.hidden = true;
      captureTimer = setTimeout(() => loadCapture(a, signal).catch((e) => { if (e.name !== 'AbortError') showError(e); }), CAPTURE_EVERY_MS);
      return;
    }
    if (state !== 'done' && !(s && s.result)) {
      capEmpty.hidden = false;
      capEmpty.textContent = `The capture ended ${state}: no profile${c.error ? ` (${c.error})` : ''}.`;
      capture.el.hidden = true;
      return;
    }
    capEmpty.hidden = true;
    capture.el.hidden = false;
    capture.loading('Loading the capture…');
    const tree = await api(`/api/v1/sessions/${encodeURIComponent(c.session)}/profile`, { format: 'tree', max_nodes: MAX_NODES }, { signal });
    capture.show(tree, { emptyText: 'The capture finished with no samples (was the worker on a CPU then?).' });
  }

  // full: load every part again (a new alert, or Refresh); else only what
  // changed since the last load (the timeline of an open alert moves on).
  async function loadDetail(id, full) {
    clearTimeout(detailTimer);
    const signal = detailCtl.signal;
    if (full) {
      shown = null;
      detailHead.replaceChildren(h('div', { class: 'empty' }, 'Loading the alert…'));
      tl.loading('Loading the timeline…');
      diff.loading('Loading the diff…');
    }
    try {
      if (full) setBusy('alert', 'Loading the alert…');
      if (!rules) await rulesLoaded(null);
      const a = await api(`/api/v1/alerts/${encodeURIComponent(id)}`, null, { signal });
      if (id !== current) return;
      const sel = selectionOf(a, (rules || []).find((r) => r.name === a.rule));
      renderHead(a);
      renderTop(a);
      const diffKey = JSON.stringify([a.started, a.resolved, a.state]);
      const capKey = JSON.stringify(a.capture);
      const jobs = [loadTimeline(a, sel, signal)];
      if (!shown || shown.diffKey !== diffKey) jobs.push(loadDiff(a, sel, signal));
      if (!shown || shown.capKey !== capKey) jobs.push(loadCapture(a, signal));
      shown = { id, diffKey, capKey };
      await Promise.all(jobs);
      if (full) setBusy('alert', null);
      if (a.state !== 'resolved') detailTimer = setTimeout(() => loadDetail(id, false), DETAIL_EVERY_MS);
    } catch (e) {
      setBusy('alert', null);
      if (e.name === 'AbortError') return;
      shown = null;
      if (full) {
        detailHead.replaceChildren(h('div', { class: 'empty' }, 'Could not load the alert (see the message above).'));
        diff.loading('No diff.');
        tl.loading('No timeline.');
      }
      showError(e);
    }
  }

  function stopDetail() {
    clearTimeout(detailTimer);
    clearTimeout(captureTimer);
    detailCtl.abort();
    detailCtl = new AbortController();
    shown = null;
  }

  return {
    el,
    // For "/" and Esc: the diff's flamegraph (hidden, and so inert, with no alert open).
    flame: diff,
    update(p, arg) {
      params = p;
      const rulesTab = params.get('tab') === 'rules';
      tabAlerts.classList.toggle('active', !rulesTab);
      tabRules.classList.toggle('active', rulesTab);
      tabAlerts.setAttribute('aria-selected', String(!rulesTab));
      tabRules.setAttribute('aria-selected', String(rulesTab));
      alertsTab.hidden = rulesTab;
      editor.el.hidden = !rulesTab;
      stateSel.value = params.get('state') || '';
      workerIn.value = params.get('worker') || '';
      if (rulesTab) {
        stopDetail();
        current = null;
        clearTimeout(listTimer);
        listKey = '';
        rulesLoaded(null);
        return;
      }
      if (!rules) rulesLoaded(null);
      else syncRuleSel();
      if (arg !== current || !arg) {
        stopDetail();
        current = arg;
        detail.hidden = !arg;
        capture.el.hidden = true;
        if (arg) loadDetail(arg, true);
      }
      loadList();
    },
    destroy() {
      clearTimeout(listTimer);
      stopDetail();
      listCtl.abort();
      listCtl = new AbortController();
      setBusy('alerts', null);
      setBusy('alert', null);
      setBusy('rules', null);
    },
  };
}

// ---------------------------------------------------------- rule editor --

// The rules with their source, a delete button for the API's own, and a
// form that POSTs a new rule; the server checks it, and its sentence (a 400
// names the field) is shown beside the form. onChange: a rule was added or
// deleted.
function ruleEditor({ onChange }) {
  const input = (testid, attrs = {}) => h('input', { testid, spellcheck: 'false', ...attrs });
  const f = {
    name: input('rule-name', { required: true, placeholder: 'cpu-hot', pattern: '[A-Za-z0-9_.\\-]{1,64}', title: 'Letters, digits, _ . - (at most 64)', size: '14' }),
    worker: input('rule-worker', { required: true, placeholder: 'api, api-* or *', size: '14' }),
    version: input('rule-version', { placeholder: 'any', size: '8' }),
    host: input('rule-host', { placeholder: 'any', size: '10' }),
    actor: input('rule-actor', { placeholder: 'any', size: '10' }),
    groupBy: h('select', { testid: 'rule-group-by' }, option('', 'nothing (one alert)', true), option('version', 'version'), option('host', 'host'), option('actor', 'actor')),
    kind: h('select', { testid: 'rule-kind' }, option('above', 'above N cores', true), option('baseline', 'above K× its baseline'), option('function', 'a function above P%')),
    above: input('rule-above', { type: 'number', step: 'any', placeholder: '0.5', value: '0.5' }),
    factor: input('rule-factor', { type: 'number', step: 'any', placeholder: '4', value: '4' }),
    period: input('rule-period', { placeholder: '1h', size: '5' }),
    floor: input('rule-floor', { type: 'number', step: 'any', placeholder: '0.1' }),
    fn: input('rule-function', { placeholder: 'function name', size: '18' }),
    percent: input('rule-percent', { type: 'number', step: 'any', placeholder: '30', value: '30' }),
    for: input('rule-for', { placeholder: '30s', value: '30s', size: '5', title: 'How long the condition must hold: 30s, 5m, 1h' }),
    capture: h('input', { type: 'checkbox', testid: 'rule-capture' }),
    capType: h('select', { testid: 'rule-capture-type' }, option('cpu', 'CPU', true), option('alloc', 'allocations')),
    capMs: input('rule-capture-ms', { type: 'number', step: '1', placeholder: '5000', value: '5000' }),
    capHz: input('rule-capture-hz', { type: 'number', step: '1', placeholder: '1000', value: '1000' }),
    webhook: input('rule-webhook', { type: 'url', placeholder: 'http://alertmanager:9093/api/v2/alerts', size: '34' }),
    format: h('select', { testid: 'rule-webhook-format' }, option('alertmanager', 'Alertmanager', true), option('json', 'plain JSON')),
  };
  const field = (label, el, extra = {}) => h('label', extra, `${label} `, el);
  const kindRows = {
    above: h('span', { class: 'kind-fields' }, field('Cores', f.above)),
    baseline: h('span', { class: 'kind-fields' }, field('Factor', f.factor), field('Period', f.period), field('Floor (cores)', f.floor)),
    function: h('span', { class: 'kind-fields' }, field('Function', f.fn), field('Percent', f.percent)),
  };
  const capFields = h('span', { class: 'kind-fields' }, field('Type', f.capType), field('Duration (ms)', f.capMs), field('Rate (Hz)', f.capHz));
  const showKind = () => {
    for (const [k, row] of Object.entries(kindRows)) row.hidden = k !== f.kind.value;
    capFields.hidden = !f.capture.checked;
    f.capHz.disabled = f.capType.value !== 'cpu';
  };
  f.kind.addEventListener('change', showKind);
  f.capture.addEventListener('change', showKind);
  f.capType.addEventListener('change', showKind);
  showKind();

  const error = h('p', { class: 'form-error', testid: 'rule-error', role: 'alert', hidden: true });
  const addBtn = h('button', { type: 'submit', class: 'primary', testid: 'rule-add' }, 'Add rule');
  const form = h('form', { class: 'rule-form', testid: 'rule-form', 'aria-label': 'Add a rule' },
    h('div', { class: 'form-row' }, h('strong', {}, 'Add a rule'), field('Name', f.name), field('Worker', f.worker),
      field('Version', f.version), field('Host', f.host), field('Actor', f.actor), field('Group by', f.groupBy)),
    h('div', { class: 'form-row' }, field('Fires when', f.kind), ...Object.values(kindRows), field('for', f.for)),
    h('div', { class: 'form-row' }, h('label', {}, f.capture, ' capture a session on firing'), capFields),
    h('div', { class: 'form-row' }, field('Webhook', f.webhook), field('Format', f.format), addBtn),
    error);

  const table = h('table', { class: 'rules', testid: 'rule-list' });
  const empty = h('div', { class: 'empty' }, 'Loading rules…');
  const el = h('div', { class: 'rules-tab', role: 'tabpanel', hidden: true }, form,
    h('section', { class: 'panel' }, h('div', { class: 'toolbar' }, h('strong', {}, 'Rules'),
      h('span', { class: 'hint' }, ' rules from the rules file (alerts.rules) are read-only here: edit the file and send the collector SIGHUP')),
    empty, table));

  const str = (x) => x.value.trim();
  const num = (x) => Number(x.value);

  // The rule as the API takes it; empty optional fields are left out, so
  // the server's defaults apply.
  function body() {
    const r = { name: str(f.name), worker: str(f.worker) };
    for (const k of ['version', 'host', 'actor']) if (str(f[k])) r[k] = str(f[k]);
    if (f.groupBy.value) r.group_by = f.groupBy.value;
    if (f.kind.value === 'above') r.above = num(f.above);
    else if (f.kind.value === 'baseline') {
      r.baseline = { factor: num(f.factor) };
      if (str(f.period)) r.baseline.period = str(f.period);
      if (str(f.floor)) r.baseline.floor = num(f.floor);
    } else r.function = { name: str(f.fn), percent: num(f.percent) };
    r.for = str(f.for) || '30s';
    if (f.capture.checked) {
      r.capture = { type: f.capType.value };
      if (str(f.capMs)) r.capture.duration_ms = num(f.capMs);
      if (f.capType.value === 'cpu' && str(f.capHz)) r.capture.hz = num(f.capHz);
    }
    if (str(f.webhook)) r.webhook = { url: str(f.webhook), format: f.format.value };
    return r;
  }

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    addBtn.disabled = true;
    error.hidden = true;
    const r = body();
    try {
      setBusy('rules', `Adding rule ${r.name}…`);
      await api('/api/v1/rules', null, { method: 'POST', body: r });
      clearError();
      f.name.value = '';
      onChange();
    } catch (e) {
      // The server's sentence, beside the form: it names the field.
      if (e.status >= 400 && e.status < 500 && e.status !== 401) {
        error.textContent = e.message;
        error.hidden = false;
      } else showError(e);
    } finally {
      setBusy('rules', null);
      addBtn.disabled = false;
    }
  });

  async function remove(name) {
    try {
      setBusy('rules', `Deleting rule ${name}…`);
      await api(`/api/v1/rules/${encodeURIComponent(name)}`, null, { method: 'DELETE' });
      clearError();
      onChange();
    } catch (e) {
      showError(e);
    } finally {
      setBusy('rules', null);
    }
  }

  // A delete asks once more on the button itself (no modal dialog).
  function deleteButton(name) {
    let armed = null;
    const b = h('button', { type: 'button', testid: 'rule-delete', title: `Delete rule ${name}` }, 'Delete');
    b.addEventListener('click', () => {
      if (armed) {
        clearTimeout(armed);
        b.disabled = true;
        remove(name);
        return;
      }
      b.textContent = 'Confirm delete';
      b.classList.add('danger');
      armed = setTimeout(() => { armed = null; b.textContent = 'Delete'; b.classList.remove('danger'); }, 5000);
    });
    return b;
  }

  function render(rules) {
    table.replaceChildren(
      h('thead', {}, h('tr', {}, ...['Name', 'Source', 'Selects', 'Fires when', 'For', 'Capture', 'Webhook', ''].map((t) => h('th', {}, t)))),
      h('tbody', {}, ...rules.map((r) => h('tr', { testid: 'rule-row', 'data-name': r.name, 'data-source': r.source || '' },
        h('td', {}, h('strong', {}, r.name)),
        h('td', {}, h('span', { class: `source ${r.source || ''}`, testid: 'rule-source' }, r.source || '?')),
        h('td', {}, selectsOf(r)),
        h('td', {}, conditionOf(r)),
        h('td', {}, r.for ?? ''),
        h('td', {}, r.capture ? `${r.capture.type} ${r.capture.duration_ms ?? ''} ms` + (r.capture.hz && r.capture.type === 'cpu' ? ` at ${r.capture.hz} Hz` : '') : '–'),
        h('td', { class: 'url' }, r.webhook ? (typeof r.webhook === 'string' ? r.webhook : `${r.webhook.url} (${r.webhook.format || 'alertmanager'})`) : '–'),
        h('td', {}, r.source === 'api' ? deleteButton(r.name) : h('span', { class: 'hint', title: r.source === 'file' ? 'From the rules file: edit it and send SIGHUP' : 'Built in' }, 'read-only'))))));
    empty.hidden = rules.length > 0;
    empty.textContent = 'No rule: add one above, or list some in a rules file (alerts.rules).';
  }

  return { el, render };
}

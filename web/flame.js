// Canvas flamegraph (an icicle: the root on top) for Ember's dashboard.
//
// The tree arrives as the API's JSON (a profile, or a diff of two
// selections). setTree() flattens it once into typed arrays in pre-order, so
// that every subtree is the contiguous index range [i, end[i]). Drawing is
// then a loop over indices that jumps over a whole subtree as soon as its
// root is narrower than MIN_W: values nest, so its descendants are narrower
// still. No recursion anywhere: a 1000-deep stack must not overflow ours.
//
// Cost model: setTree is O(nodes); a draw is O(frames wide enough to see):
// one fillRect each, grouped by colour, on whole device pixels (Chromium's
// software rasterizer fills those several times faster than a path of
// fractional rects), and one fillText per frame wide enough for a label.
// Hover and click are a binary search in one row of what was drawn.
//
// API (web/app.js and tests/browser depend on it):
//   new FlameGraph(container, {onZoom(path), onSelect(frame)})
//   setTree(json)      profile or diff tree (diff when root.base is set)
//   zoomToPath(names)  silent; resetZoom() tells onZoom([])
//   setSearch(text)    substring or /regex/, case-insensitive, of the
//                      name or the generated name; returns
//                      {matches, total} (diff: total in vs, + base)
//   frames()           drawn frames, CSS px relative to the canvas; in a
//                      diff total/self are the vs side, base/baseSelf the
//                      other; also kind, path, file, line and generated
//                      (when the tree has them) and (searching) match
//   resize(), destroy(), lastRenderMs (setTree + draw), lastDrawMs,
//   lastFlattenMs, lastSearchMs
// The container gets .flame and data-zoom, data-search-matches,
// data-nodes, data-render-ms; the canvas data-testid="flame-canvas", the
// hover's tooltip data-testid="flame-tooltip".
//
// The tooltip names the frame, then where its source is (`file:line`, or
// the file alone when the frames merged into the node disagree on the
// line) and, for a JavaScript function named through a source map, the
// name it runs under ("minified: a /srv/app/dist/app.js:1:4711"): the
// tree's optional `file`, `line` and `generated` (docs/api.md).
//
// Names come from profiled programs: they only ever reach the DOM through
// textContent, never innerHTML.

const ROW = 18; // CSS px per stack level
const MIN_W = 0.5; // CSS px; narrower frames (and their subtrees) are skipped
const LABEL_MIN = 20; // CSS px a frame needs before it gets a label
const PAD = 3; // label padding inside a frame
const FONT = '11px ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace';
// Chromium refuses canvases over 32767 px a side or ~268 M px in area; a
// deep tree at DPR 2 would pass both, so the backing store gives up
// sharpness rather than disappear.
const MAX_SIDE = 16384;
const MAX_AREA = 64 * 1024 * 1024;

// Hue families by frame kind, so that kernel, JIT and interpreter frames
// stand apart from native code at a glance; within a family the shade is
// hashed from the function name, so a function keeps its colour across
// reloads, zooms and profiles.
const KINDS = ['native', 'kernel', 'jit', 'interpreted', 'other'];
const FAMILY = [
  { h0: 0, h1: 38, s: 78, l0: 60, l1: 70 }, // native: red to orange
  { h0: 195, h1: 225, s: 60, l0: 64, l1: 74 }, // kernel: blue
  { h0: 80, h1: 130, s: 50, l0: 55, l1: 66 }, // jit: green
  { h0: 160, h1: 185, s: 50, l0: 55, l1: 66 }, // interpreted: teal
  { h0: 30, h1: 55, s: 35, l0: 62, l1: 72 }, // unknown kind: sand
];
const SHADES = 24;

// Diff colours: the change in a frame's share of its selection's total,
// in DIFF_STEPS steps each way, saturating at DIFF_SAT percentage points.
const DIFF_STEPS = 10;
const DIFF_SAT = 5;

function hsl(h, s, l) {
  return `hsl(${h.toFixed(1)},${s}%,${l}%)`;
}

// FNV-1a: cheap, stable across sessions, good enough to spread shades.
function hashName(s) {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

// One palette for both modes: entries are CSS colours plus the label colour
// that reads on each. Frames store an index into it (Uint8), so
// a draw can bucket frames by colour and fill each bucket as one path.
function buildPalette() {
  const fill = [];
  const text = []; // label colour on each fill: index into TEXT
  for (let k = 0; k < FAMILY.length; k++) {
    const f = FAMILY[k];
    for (let i = 0; i < SHADES; i++) {
      const t = i / (SHADES - 1);
      fill.push(hsl(f.h0 + (f.h1 - f.h0) * t, f.s, f.l0 + (f.l1 - f.l0) * ((i * 7) % SHADES) / (SHADES - 1)));
      text.push(0);
    }
  }
  const diff0 = fill.length;
  // -DIFF_STEPS..+DIFF_STEPS: blue (shrank) through light grey to red (grew).
  for (let s = -DIFF_STEPS; s <= DIFF_STEPS; s++) {
    const a = Math.abs(s) / DIFF_STEPS;
    if (s === 0) fill.push('hsl(0,0%,86%)');
    else fill.push(hsl(s > 0 ? 0 : 215, Math.round(45 + 40 * a), Math.round(88 - 36 * a)));
    text.push(a < 0.75 ? 0 : 1);
  }
  const special = {};
  const add = (name, c, t) => {
    special[name] = fill.length;
    fill.push(c);
    text.push(t);
  };
  add('added', '#c4161c', 1); // only in the second selection
  add('removed', '#1c5fc4', 1); // only in the first
  add('ancestor', '#d4d4d4', 2); // above the zoomed frame
  add('match', '#e536d9', 1); // search hit
  add('dim', '#e8e8e8', 2); // search miss
  return { fill, text, diff0, special };
}

const PALETTE = buildPalette();
const TEXT = ['#1b1b1b', '#ffffff', '#737373']; // dark, white, greyed

// Formats a value of the profile's unit for people: 3 significant digits,
// trailing zeros dropped ("1.2 s", "850 ms", "12.3 MB", "4.5k").
export function formatValue(v, unit) {
  if (typeof v !== 'number' || !Number.isFinite(v)) return '–';
  const sign = v < 0 ? '-' : '';
  const a = Math.abs(v);
  const num = (x) => {
    const s = x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2);
    return s.includes('.') ? s.replace(/\.?0+$/, '') : s;
  };
  let steps;
  if (unit === 'nanoseconds') {
    if (a >= 600e9) {
      // Aggregated profiles reach CPU-hours; seconds stop meaning much there.
      return sign + (a >= 7200e9 ? num(a / 3600e9) + ' h' : num(a / 60e9) + ' min');
    }
    steps = [[1e9, ' s'], [1e6, ' ms'], [1e3, ' µs'], [1, ' ns']];
  } else if (unit === 'bytes') {
    // SI units, so that the label says what the arithmetic did.
    steps = [[1e12, ' TB'], [1e9, ' GB'], [1e6, ' MB'], [1e3, ' kB'], [1, ' B']];
  } else {
    steps = [[1e12, 'T'], [1e9, 'G'], [1e6, 'M'], [1e3, 'k']];
  }
  for (const [d, suffix] of steps) {
    // 999.6 ms would print as "1000 ms": promote it to the next unit.
    if (a >= d * 0.9995 && d > 1) return sign + num(a / d) + suffix;
  }
  const last = steps[steps.length - 1];
  const body = Number.isInteger(a) ? String(a) : num(a);
  return sign + body + (last[0] === 1 ? last[1] : '');
}

function pct(x) {
  if (!Number.isFinite(x)) return '–';
  const p = x * 100;
  return (Math.abs(p) >= 10 ? p.toFixed(1) : p.toFixed(2)) + '%';
}

export class FlameGraph {
  constructor(container, opts = {}) {
    this.container = container;
    this.opts = opts;
    this.lastRenderMs = 0;
    this.lastDrawMs = 0;

    const cs = getComputedStyle(container);
    if (cs.position === 'static') container.style.position = 'relative';

    this.canvas = document.createElement('canvas');
    this.canvas.dataset.testid = 'flame-canvas';
    this.canvas.setAttribute('role', 'img');
    this.canvas.setAttribute('aria-label', 'Flamegraph');
    this.canvas.style.display = 'block';
    this.canvas.style.cursor = 'pointer';
    this.ctx = this.canvas.getContext('2d', { alpha: false });

    // The hover outline is a div, not a redraw: moving the mouse costs a
    // style change instead of repainting up to 100k frames.
    this.hoverBox = document.createElement('div');
    this.hoverBox.className = 'flame-hover';
    Object.assign(this.hoverBox.style, {
      position: 'absolute', pointerEvents: 'none', display: 'none',
      boxSizing: 'border-box', border: '1.5px solid #111', borderRadius: '1px',
    });

    this.tooltip = document.createElement('div');
    this.tooltip.className = 'flame-tooltip';
    this.tooltip.dataset.testid = 'flame-tooltip';
    this.tooltip.setAttribute('role', 'tooltip');
    Object.assign(this.tooltip.style, {
      position: 'fixed', pointerEvents: 'none', display: 'none', zIndex: '1000',
      maxWidth: '480px', padding: '6px 8px', borderRadius: '4px',
      background: 'rgba(24,24,27,0.94)', color: '#f4f4f5',
      font: '12px system-ui, sans-serif', lineHeight: '1.45',
      boxShadow: '0 2px 8px rgba(0,0,0,0.3)', wordBreak: 'break-all',
    });

    container.append(this.canvas, this.hoverBox, this.tooltip);
    container.flame = this;

    this._clear();
    this._charW = 0;
    this._cssW = 0;
    this._cssH = 0;
    this._scale = 0;
    this._hover = -1;

    this._onMove = (e) => this._hoverAt(e);
    this._onLeave = () => this._hideHover();
    this._onClick = (e) => this._clickAt(e);
    this.canvas.addEventListener('mousemove', this._onMove);
    this.canvas.addEventListener('mouseleave', this._onLeave);
    this.canvas.addEventListener('click', this._onClick);

    // Relayout on width (or pixel ratio: browser zoom) changes only: our own
    // height change also resizes a growing container, and must not loop
    // back into a redraw.
    this._raf = 0;
    this._ro = new ResizeObserver(() => {
      if (this._raf) return;
      this._raf = requestAnimationFrame(() => {
        this._raf = 0;
        if (this.container.clientWidth !== this._cssW || (window.devicePixelRatio || 1) !== this._dpr) this.resize();
      });
    });
    this._ro.observe(container);
    this._setAttrs();
  }

  // State of an empty graph; setTree replaces all of it.
  _clear() {
    this.n = 0;
    this.diff = false;
    this.unit = 'count';
    this.names = [];
    this.modules = [];
    this.files = [];
    this.gens = [];
    this._zoom = 0;
    this._match = null; // Uint8Array per node while a search is on
    this._searchResult = { matches: 0, total: 0 };
    this._nd = 0; // frames drawn
    this._rows = null; // per-row index of drawn frames, built on first hover
  }

  // Accepts the profile tree or the diff tree (a string is parsed first).
  setTree(json) {
    const t0 = performance.now();
    if (typeof json === 'string') json = JSON.parse(json);
    this._clear();
    const root = json && json.root;
    if (root) this._flatten(json, root);
    this.lastFlattenMs = performance.now() - t0;
    this._draw();
    this.lastRenderMs = performance.now() - t0;
    this._setAttrs();
  }

  _flatten(json, root) {
    const diff = root.base !== undefined;
    this.diff = diff;
    this.unit = json.unit || 'count';

    // One pass, pre-order, with an explicit stack: children are pushed in
    // reverse so that they come out in the API's order (left to right), and
    // a child's start is its parent's running cursor. The arrays are sized
    // from the API's node count and grow if that was wrong.
    let cap = Math.max(16, (Number(json.nodes) || 0) + 1);
    const alloc = (T, old) => {
      const a = new T(cap);
      if (old) a.set(old);
      return a;
    };
    let start = alloc(Float64Array), val = alloc(Float64Array), self = alloc(Float64Array);
    let depth = alloc(Int32Array), parent = alloc(Int32Array), cursor = alloc(Float64Array);
    let nameIdx = alloc(Int32Array), modIdx = alloc(Int32Array), kind = alloc(Uint8Array), col = alloc(Uint8Array);
    // Where the source is and the generated name, for the tooltip and the
    // search; most trees (native code without debug lines) have none.
    let fileIdx = alloc(Int32Array), lineNo = alloc(Uint32Array), genIdx = alloc(Int32Array);
    let base = null, vs = null, baseSelf = null;

    // Diff widths: the mean of the frame's shares of its two selections,
    // (base/B + vs/V) / 2. Unlike max(base share, vs share) it adds up (the
    // children of a frame never outgrow it) and unlike vs alone it keeps
    // frames that disappeared visible, drawn in blue, at half their old
    // width. When one selection is empty, the other's share alone.
    let B = 0, V = 0;
    if (diff) {
      B = Number((json.base && json.base.total) ?? root.base) || 0;
      V = Number((json.vs && json.vs.total) ?? root.vs) || 0;
      base = alloc(Float64Array);
      vs = alloc(Float64Array);
      baseSelf = alloc(Float64Array);
      this.B = B;
      this.V = V;
    }
    const wb = B > 0 ? (V > 0 ? 0.5 / B : 1 / B) : 0;
    const wv = V > 0 ? (B > 0 ? 0.5 / V : 1 / V) : 0;
    const d0 = PALETTE.diff0 + DIFF_STEPS;
    const sp = PALETTE.special;

    const nameMap = new Map();
    const modMap = new Map([['', 0]]);
    const names = (this.names = []);
    const modules = (this.modules = ['']);
    const nameShade = [];
    // Index 0 of each is "none", as for modules.
    const fileMap = new Map([['', 0]]);
    const files = (this.files = ['']);
    const genMap = new Map([['', 0]]);
    const gens = (this.gens = ['']);
    const intern = (map, list, s) => {
      let k = map.get(s);
      if (k === undefined) {
        k = list.length;
        map.set(s, k);
        list.push(String(s));
      }
      return k;
    };
    const kindCode = { native: 0, kernel: 1, jit: 2, interpreted: 3 };
    let lastMod = null, lastMi = 0;

    const stack = [root];
    const stackPar = [-1];
    let n = 0;
    while (stack.length) {
      const node = stack.pop();
      const p = stackPar.pop();
      if (n === cap) {
        cap *= 2;
        start = alloc(Float64Array, start); val = alloc(Float64Array, val); self = alloc(Float64Array, self);
        depth = alloc(Int32Array, depth); parent = alloc(Int32Array, parent); cursor = alloc(Float64Array, cursor);
        nameIdx = alloc(Int32Array, nameIdx); modIdx = alloc(Int32Array, modIdx);
        kind = alloc(Uint8Array, kind); col = alloc(Uint8Array, col);
        fileIdx = alloc(Int32Array, fileIdx); lineNo = alloc(Uint32Array, lineNo); genIdx = alloc(Int32Array, genIdx);
        if (diff) {
          base = alloc(Float64Array, base); vs = alloc(Float64Array, vs); baseSelf = alloc(Float64Array, baseSelf);
        }
      }
      const i = n++;
      const ch = node.children;
      if (ch) for (let c = ch.length - 1; c >= 0; c--) {
        stack.push(ch[c]);
        stackPar.push(i);
      }

      const nm = node.name;
      let ni = nameMap.get(nm);
      if (ni === undefined) {
        ni = names.length;
        nameMap.set(nm, ni);
        const str = nm == null ? '' : String(nm);
        names.push(str);
        nameShade.push(hashName(str) % SHADES);
      }
      nameIdx[i] = ni;
      const mod = node.module;
      if (mod) {
        // A caller and its callee often share a module: skip the hash.
        let mi = mod === lastMod ? lastMi : modMap.get(mod);
        if (mi === undefined) {
          mi = modules.length;
          modMap.set(mod, mi);
          modules.push(String(mod));
        }
        modIdx[i] = mi;
        lastMod = mod;
        lastMi = mi;
      }
      const k = kindCode[node.kind] ?? 4;
      kind[i] = k;
      if (node.file) fileIdx[i] = intern(fileMap, files, node.file);
      const ln = +node.line;
      if (ln > 0 && ln <= 0xffffffff) lineNo[i] = ln;
      if (node.generated) genIdx[i] = intern(genMap, gens, node.generated);

      let v;
      if (diff) {
        const b = +node.base || 0;
        const x = +node.vs || 0;
        base[i] = b;
        vs[i] = x;
        baseSelf[i] = +node.base_self || 0;
        self[i] = +node.vs_self || 0;
        v = b * wb + x * wv;
        if (b === 0 && x > 0 && i > 0) col[i] = sp.added;
        else if (x === 0 && b > 0 && i > 0) col[i] = sp.removed;
        else {
          const dpp = ((V > 0 ? x / V : 0) - (B > 0 ? b / B : 0)) * 100;
          let st = Math.round((dpp / DIFF_SAT) * DIFF_STEPS);
          st = st > DIFF_STEPS ? DIFF_STEPS : st < -DIFF_STEPS ? -DIFF_STEPS : st;
          col[i] = d0 + st;
        }
      } else {
        v = +node.total || 0;
        self[i] = +node.self || 0;
        col[i] = k * SHADES + nameShade[ni];
      }
      val[i] = v;
      parent[i] = p;
      if (p >= 0) {
        depth[i] = depth[p] + 1;
        const s0 = cursor[p];
        start[i] = s0;
        cursor[p] = s0 + v;
        cursor[i] = s0;
      }
    }
    this.n = n;
    this.start = start; this.val = val; this.self = self; this.depth = depth; this.parent = parent;
    this.nameIdx = nameIdx; this.modIdx = modIdx; this.kind = kind; this.col = col;
    this.fileIdx = fileIdx; this.lineNo = lineNo; this.genIdx = genIdx;
    this.base = base; this.vs = vs; this.baseSelf = baseSelf;

    // Subtree ends, from the leaves up: pre-order makes each subtree the
    // range [i, end[i]).
    const end = (this.end = new Int32Array(cap));
    for (let i = 0; i < n; i++) end[i] = i + 1;
    for (let i = n - 1; i > 0; i--) {
      const p = parent[i];
      if (end[i] > end[p]) end[p] = end[i];
    }
  }

  // Zooms to the frame at that path of names below the root; an unknown
  // path leaves the zoom as it is. Does not call onZoom (the caller knows).
  zoomToPath(names) {
    const i = this._find(names || []);
    if (i < 0) return;
    this._zoom = i;
    this._draw();
    this._setAttrs();
  }

  resetZoom() {
    this._zoom = 0;
    this._draw();
    this._setAttrs();
    if (this.opts.onZoom) this.opts.onZoom([]);
  }

  _find(names) {
    if (this.n === 0) return -1;
    let p = 0;
    for (const want of names) {
      let c = p + 1;
      let found = -1;
      while (c < this.end[p]) {
        if (this.names[this.nameIdx[c]] === want) {
          found = c;
          break;
        }
        c = this.end[c]; // next sibling
      }
      if (found < 0) return -1;
      p = found;
    }
    return p;
  }

  _path(i) {
    const out = [];
    for (; i > 0; i = this.parent[i]) out.push(this.names[this.nameIdx[i]]);
    return out.reverse();
  }

  // Highlights frames whose name contains text (case-insensitive), or
  // matches /regex/ when text is wrapped in slashes; a frame's generated
  // name counts as its name, so that a minified name or a bundle's
  // line:column from a stack trace finds the function. The synthetic root is
  // never a match. total counts each matching subtree once: a match inside
  // a match adds nothing (for a diff, total is in the second selection and
  // base in the first).
  setSearch(text) {
    const t0 = performance.now();
    const q = String(text ?? '').trim();
    this._match = null;
    let result = { matches: 0, total: 0 };
    if (q !== '' && this.n > 0) {
      let test;
      const m = /^\/(.+)\/([a-z]*)$/.exec(q);
      if (m) {
        let re = null;
        try {
          re = new RegExp(m[1], m[2].includes('i') ? m[2] : m[2] + 'i');
        } catch (e) {
          re = null; // a half-typed pattern matches nothing
        }
        test = (s) => re !== null && re.test(s);
      } else {
        const lq = q.toLowerCase();
        test = (s) => s.toLowerCase().includes(lq);
      }
      // Test each distinct name once: ~20x fewer tests than nodes.
      const nameHit = new Uint8Array(this.names.length);
      for (let k = 0; k < this.names.length; k++) nameHit[k] = test(this.names[k]) ? 1 : 0;
      const gens = this.gens, genIdx = this.genIdx;
      const genHit = new Uint8Array(gens.length); // [0], no generated name, stays 0
      for (let k = 1; k < gens.length; k++) genHit[k] = test(gens[k]) ? 1 : 0;
      const match = new Uint8Array(this.n);
      const tot = this.diff ? this.vs : this.val;
      let count = 0, total = 0, base = 0, coverEnd = 0;
      for (let i = 1; i < this.n; i++) {
        if (!nameHit[this.nameIdx[i]] && !genHit[genIdx[i]]) continue;
        match[i] = 1;
        count++;
        if (i >= coverEnd) {
          total += tot[i];
          if (this.diff) base += this.base[i];
          coverEnd = this.end[i];
        }
      }
      this._match = match;
      result = this.diff ? { matches: count, total, base } : { matches: count, total };
    }
    this._searchResult = result;
    this._draw();
    this.lastSearchMs = performance.now() - t0;
    this._setAttrs();
    return result;
  }

  resize() {
    this._draw();
    this._setAttrs();
  }

  destroy() {
    this._ro.disconnect();
    if (this._raf) cancelAnimationFrame(this._raf);
    this.canvas.removeEventListener('mousemove', this._onMove);
    this.canvas.removeEventListener('mouseleave', this._onLeave);
    this.canvas.removeEventListener('click', this._onClick);
    this.canvas.remove();
    this.hoverBox.remove();
    this.tooltip.remove();
    if (this.container.flame === this) delete this.container.flame;
    this._clear();
  }

  // The frames drawn now, in CSS px relative to the canvas.
  frames() {
    const out = new Array(this._nd);
    for (let d = 0; d < this._nd; d++) out[d] = this._frame(d);
    return out;
  }

  _frame(d) {
    const i = this._dIdx[d];
    const f = {
      name: this.names[this.nameIdx[i]],
      module: this.modules[this.modIdx[i]] || undefined,
      kind: KINDS[this.kind[i]],
      x: this._dX[d],
      y: this.depth[i] * ROW,
      w: this._dW[d],
      h: ROW,
      depth: this.depth[i],
      self: this.self[i],
      total: this.diff ? this.vs[i] : this.val[i],
      path: this._path(i),
    };
    if (this.fileIdx[i]) f.file = this.files[this.fileIdx[i]];
    if (this.lineNo[i]) f.line = this.lineNo[i];
    if (this.genIdx[i]) f.generated = this.gens[this.genIdx[i]];
    if (this.diff) {
      f.base = this.base[i];
      f.baseSelf = this.baseSelf[i];
      f.vs = this.vs[i];
    }
    if (this._match) f.match = this._match[i] === 1;
    return f;
  }

  _setAttrs() {
    const c = this.container;
    const path = this.n > 0 ? this._path(this._zoom) : [];
    c.dataset.zoom = path.join(';');
    c.dataset.searchMatches = String(this._searchResult.matches);
    c.dataset.nodes = String(this.n);
    c.dataset.renderMs = this.lastRenderMs.toFixed(1);
  }

  // Lays out what is visible, sizes the canvas to it, then paints.
  _draw() {
    const t0 = performance.now();
    this._rows = null;
    this._hideHover();
    const W = this.container.clientWidth;
    const n = this.n;
    if (!this._dIdx || this._dIdx.length < n) {
      this._dIdx = new Int32Array(n);
      this._dX = new Float32Array(n);
      this._dW = new Float32Array(n);
      this._dC = new Uint8Array(n);
    }
    const dIdx = this._dIdx, dX = this._dX, dW = this._dW, dC = this._dC;
    let nd = 0;
    let maxDepth = -1;
    const z = this._zoom;
    if (n > 0 && W > 0 && this.val[z] > 0) {
      const { val, start, end, col } = this;
      const match = this._match;
      const sp = PALETTE.special;
      // Ancestors of the zoomed frame, full width and greyed, top-down.
      const anc = [];
      for (let a = this.parent[z]; a >= 0; a = this.parent[a]) anc.push(a);
      for (let k = anc.length - 1; k >= 0; k--) {
        dIdx[nd] = anc[k];
        dX[nd] = 0;
        dW[nd] = W;
        dC[nd] = sp.ancestor;
        nd++;
      }
      const scale = W / val[z];
      const x0 = start[z];
      const depth = this.depth;
      const e = end[z];
      let i = z;
      while (i < e) {
        const w = val[i] * scale;
        if (w < MIN_W) {
          i = end[i]; // its whole subtree is narrower still
          continue;
        }
        dIdx[nd] = i;
        dX[nd] = (start[i] - x0) * scale;
        dW[nd] = w;
        dC[nd] = match ? (match[i] ? sp.match : sp.dim) : col[i];
        if (depth[i] > maxDepth) maxDepth = depth[i];
        nd++;
        i++;
      }
    }
    this._nd = nd;
    this._sizeCanvas(W, nd > 0 ? (maxDepth + 1) * ROW : 0);
    this._paint();
    this.lastDrawMs = performance.now() - t0;
  }

  _sizeCanvas(cssW, cssH) {
    const dpr = window.devicePixelRatio || 1;
    this._dpr = dpr;
    let s = dpr;
    if (cssW > 0 && cssH > 0) {
      s = Math.min(dpr, MAX_SIDE / cssW, MAX_SIDE / cssH, Math.sqrt(MAX_AREA / (cssW * cssH)));
    }
    const bw = Math.round(cssW * s), bh = Math.round(cssH * s);
    if (this.canvas.width !== bw || this.canvas.height !== bh) {
      this.canvas.width = bw;
      this.canvas.height = bh;
    }
    if (this._cssW !== cssW || this._cssH !== cssH) {
      this.canvas.style.width = cssW + 'px';
      this.canvas.style.height = cssH + 'px';
    }
    this._cssW = cssW;
    this._cssH = cssH;
    this._scale = s;
  }

  _paint() {
    const ctx = this.ctx;
    const nd = this._nd;
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.fillStyle = '#fff';
    ctx.fillRect(0, 0, this.canvas.width, this.canvas.height);
    if (nd === 0) return;
    ctx.setTransform(this._scale, 0, 0, this._scale, 0, 0);
    const dIdx = this._dIdx, dX = this._dX, dW = this._dW, dC = this._dC;
    const depth = this.depth;

    // Bucket the drawn frames by colour (a counting sort) so that each
    // colour is one path and one fill.
    const ncol = PALETTE.fill.length;
    const count = new Int32Array(ncol + 1);
    for (let d = 0; d < nd; d++) count[dC[d] + 1]++;
    for (let c = 0; c < ncol; c++) count[c + 1] += count[c];
    const order = new Int32Array(nd);
    const pos = count.slice(0, ncol);
    for (let d = 0; d < nd; d++) order[pos[dC[d]]++] = d;

    // Rectangles go straight to device pixels with whole-pixel edges:
    // Chromium's software rasterizer fills an axis-aligned fillRect on
    // pixel boundaries several times faster than a path of rects (and the
    // edges are crisp). Frames narrower than a device pixel still get one.
    const H = ROW - 1; // a 1 px gap between rows
    const s = this._scale;
    const gap = Math.max(1, Math.floor(s)); // 1 CSS px between siblings
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    for (let c = 0; c < ncol; c++) {
      const a = count[c], b = count[c + 1];
      if (a === b) continue;
      ctx.fillStyle = PALETTE.fill[c];
      for (let k = a; k < b; k++) {
        const d = order[k];
        const x = dX[d], w = dW[d], y = depth[dIdx[d]] * ROW;
        const x0 = Math.round(x * s);
        let dw = Math.round((x + w) * s) - x0;
        if (w >= 3) dw -= gap;
        const y0 = Math.round(y * s);
        ctx.fillRect(x0, y0, dw < 1 ? 1 : dw, Math.round((y + H) * s) - y0);
      }
    }
    ctx.setTransform(s, 0, 0, s, 0, 0);

    // Labels, ellipsized with a per-font character width measured once
    // (the font is monospace; measureText per frame would dominate).
    ctx.font = FONT;
    ctx.textBaseline = 'middle';
    if (!this._charW) {
      const sample = 'abcdefghijklmnopqrstuvwxyz_:ABCDEFGH0123456789';
      this._charW = ctx.measureText(sample).width / sample.length || 7;
    }
    const cw = this._charW;
    const names = this.names, nameIdx = this.nameIdx;
    const textOf = PALETTE.text;
    for (let t = 0; t < TEXT.length; t++) {
      ctx.fillStyle = TEXT[t];
      for (let d = 0; d < nd; d++) {
        const w = dW[d];
        if (w < LABEL_MIN || textOf[dC[d]] !== t) continue;
        const max = Math.floor((w - 2 * PAD) / cw);
        if (max < 2) continue;
        let s = names[nameIdx[dIdx[d]]];
        if (s.length > max) s = s.slice(0, max - 1) + '…';
        ctx.fillText(s, dX[d] + PAD, depth[dIdx[d]] * ROW + H / 2 + 0.5);
      }
    }
  }

  // Drawn frames bucketed by row; within a row they are in x order because
  // the draw walked the tree in pre-order.
  _buildRows() {
    const nd = this._nd;
    const rows = Math.max(1, Math.ceil(this._cssH / ROW));
    const rowStart = new Int32Array(rows + 1);
    for (let d = 0; d < nd; d++) rowStart[this.depth[this._dIdx[d]] + 1]++;
    for (let r = 0; r < rows; r++) rowStart[r + 1] += rowStart[r];
    const items = new Int32Array(nd);
    const pos = rowStart.slice(0, rows);
    for (let d = 0; d < nd; d++) items[pos[this.depth[this._dIdx[d]]]++] = d;
    this._rows = { rowStart, items, rows };
  }

  // Index into the drawn frames at (x, y) CSS px on the canvas, or -1.
  _hit(x, y) {
    if (this._nd === 0) return -1;
    if (!this._rows) this._buildRows();
    const { rowStart, items, rows } = this._rows;
    const r = Math.floor(y / ROW);
    if (r < 0 || r >= rows) return -1;
    let lo = rowStart[r], hi = rowStart[r + 1] - 1, best = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (this._dX[items[mid]] <= x) {
        best = mid;
        lo = mid + 1;
      } else hi = mid - 1;
    }
    if (best < 0) return -1;
    const d = items[best];
    return x < this._dX[d] + this._dW[d] ? d : -1;
  }

  _hoverAt(e) {
    const d = this._hit(e.offsetX, e.offsetY);
    if (d < 0) {
      this._hideHover();
      return;
    }
    if (d !== this._hover) {
      this._hover = d;
      const i = this._dIdx[d];
      Object.assign(this.hoverBox.style, {
        display: 'block',
        left: this.canvas.offsetLeft + this._dX[d] + 'px',
        top: this.canvas.offsetTop + this.depth[i] * ROW + 'px',
        width: Math.max(2, this._dW[d]) + 'px',
        height: ROW - 1 + 'px',
      });
      this._fillTooltip(i);
      this.tooltip.style.display = 'block';
    }
    this._placeTooltip(e.clientX, e.clientY);
  }

  _hideHover() {
    this._hover = -1;
    if (this.hoverBox) this.hoverBox.style.display = 'none';
    if (this.tooltip) this.tooltip.style.display = 'none';
  }

  _placeTooltip(cx, cy) {
    const t = this.tooltip;
    const tw = t.offsetWidth, th = t.offsetHeight;
    const vw = document.documentElement.clientWidth, vh = document.documentElement.clientHeight;
    let x = cx + 14, y = cy + 16;
    if (x + tw > vw - 4) x = Math.max(4, cx - tw - 14);
    if (y + th > vh - 4) y = Math.max(4, cy - th - 12);
    t.style.left = x + 'px';
    t.style.top = y + 'px';
  }

  _fillTooltip(i) {
    const t = this.tooltip;
    t.replaceChildren();
    const line = (text, style) => {
      const div = document.createElement('div');
      div.textContent = text;
      if (style) Object.assign(div.style, style);
      t.append(div);
    };
    const u = this.unit;
    const f = (v) => formatValue(v, u);
    line(this.names[this.nameIdx[i]], { fontWeight: '600', fontFamily: 'ui-monospace, monospace' });
    const where = this._location(i);
    if (where) line(where, { fontFamily: 'ui-monospace, monospace' });
    const gen = this.gens[this.genIdx[i]];
    if (gen) line(`minified: ${gen}`, { color: '#a1a1aa', fontFamily: 'ui-monospace, monospace' });
    const mod = this.modules[this.modIdx[i]];
    const kind = KINDS[this.kind[i]];
    if (mod || kind !== 'other') line([mod, kind !== 'other' ? kind : ''].filter(Boolean).join(' · '), { color: '#a1a1aa' });
    const z = this._zoom;
    if (!this.diff) {
      const all = this.val[0], tot = this.val[i];
      let s = `total ${f(tot)} · ${pct(tot / all)} of all`;
      if (z > 0) s += ` · ${pct(tot / this.val[z])} of ${this.names[this.nameIdx[z]]}`;
      line(s);
      line(`self ${f(this.self[i])} · ${pct(this.self[i] / all)} of all`);
      return;
    }
    const b = this.base[i], v = this.vs[i];
    const bs = this.B > 0 ? b / this.B : 0, vsh = this.V > 0 ? v / this.V : 0;
    line(`base ${f(b)} (${pct(bs)}) → vs ${f(v)} (${pct(vsh)})`);
    const dpp = (vsh - bs) * 100;
    let rel;
    if (b === 0 && v > 0) rel = 'new';
    else if (v === 0 && b > 0) rel = 'gone';
    else if (bs > 0) rel = `${vsh >= bs ? '+' : ''}${((vsh / bs - 1) * 100).toFixed(1)}%`;
    else rel = '–';
    line(`share ${dpp >= 0 ? '+' : ''}${dpp.toFixed(2)} pp · ${rel}`, {
      color: dpp > 0.005 ? '#fca5a5' : dpp < -0.005 ? '#93c5fd' : undefined,
    });
    line(`self base ${f(this.baseSelf[i])} → vs ${f(this.self[i])}`);
    if (z > 0) {
      const zb = this.base[z], zv = this.vs[z];
      line(`of ${this.names[this.nameIdx[z]]}: ${pct(zb > 0 ? b / zb : 0)} → ${pct(zv > 0 ? v / zv : 0)}`);
    }
  }

  // "file:line", the file alone, or "line N" when the tree has a line but
  // no file; '' when it has neither.
  _location(i) {
    const file = this.files[this.fileIdx[i]], ln = this.lineNo[i];
    if (file) return ln ? `${file}:${ln}` : file;
    return ln ? `line ${ln}` : '';
  }

  _clickAt(e) {
    const d = this._hit(e.offsetX, e.offsetY);
    if (d < 0) return;
    const i = this._dIdx[d];
    if (this.opts.onSelect) this.opts.onSelect(this._frame(d));
    if (i === 0) {
      this.resetZoom();
      return;
    }
    if (i === this._zoom) return;
    this._zoom = i;
    this._draw();
    this._setAttrs();
    if (this.opts.onZoom) this.opts.onZoom(this._path(i));
  }
}

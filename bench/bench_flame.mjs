// Flamegraph rendering benchmark: web/flame.js on a synthetic 100,000-node
// profile in headless Chromium, against d3-flame-graph on the same tree in
// the same run. Run through bench/bench_flame.sh (it installs the drivers).
//
// node bench/bench_flame.mjs [runs]   (default 10 runs per figure)

import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import os from 'node:os';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..');
const require = createRequire(path.join(here, 'browser', 'package.json'));
const { chromium } = require('playwright-core');

const RUNS = Number(process.argv[2]) || 10;
const loadBefore = os.loadavg().map((x) => x.toFixed(2)).join(' ');
const GOAL_MS = 200;
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';

// A static server for web/ and bench/ only: ES modules need http, and
// nothing else in the repo has any business being served.
const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.mjs': 'text/javascript', '.css': 'text/css', '.json': 'application/json' };
const server = http.createServer((req, res) => {
  const p = path.normalize(decodeURIComponent(new URL(req.url, 'http://x').pathname));
  const file = path.join(repo, p);
  const ok = (file.startsWith(path.join(repo, 'web') + path.sep) || file.startsWith(path.join(repo, 'bench') + path.sep)) && fs.existsSync(file) && fs.statSync(file).isFile();
  if (!ok) {
    res.writeHead(404).end();
    return;
  }
  res.writeHead(200, { 'content-type': TYPES[path.extname(file)] || 'application/octet-stream', 'cache-control': 'no-store' });
  fs.createReadStream(file).pipe(res);
});
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const base = `http://127.0.0.1:${server.address().port}`;

// Chromium phones home (updates, sync, QUIC probes) unless told not to;
// the network here is closed and those retries would only add noise.
const browser = await chromium.launch({
  executablePath: CHROMIUM,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});

const stat = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return { median: s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2, max: s[s.length - 1] };
};

const rows = [];
const configs = [
  { label: '1280×800 DPR 1', width: 1280, height: 800, dpr: 1 },
  { label: '1920×1080 DPR 2', width: 1920, height: 1080, dpr: 2 },
];
let peerMissing = false;
let shape = null;
for (const cfg of configs) {
  const ctx = await browser.newContext({ viewport: { width: cfg.width, height: cfg.height }, deviceScaleFactor: cfg.dpr });
  const page = await ctx.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(`${base}/bench/flame.html`);
  await page.waitForFunction(() => window.bench && window.bench.ready);
  if (errors.length) throw new Error('page: ' + errors.join('; '));

  for (const kind of ['profile', 'diff']) {
    // The first run is apart: it pays for the JIT warming up, as a page
    // load does (the synthetic tree is built before its timing starts).
    const cold = await page.evaluate((k) => window.bench.ours(k), kind);
    rows.push({ cfg: cfg.label, what: `ours, ${kind}: first (cold) setTree + first draw`, frames: cold.frames, median: cold.setTree, max: cold.setTree });
    const set = [], paint = [], search = [], searchPaint = [], zoom = [], zoomPaint = [];
    let frames = 0;
    for (let i = 0; i < RUNS; i++) {
      const r = await page.evaluate((k) => window.bench.ours(k), kind);
      set.push(r.setTree);
      paint.push(r.paint);
      frames = r.frames;
      const q = await page.evaluate(() => window.bench.interact());
      search.push(q.search);
      searchPaint.push(q.searchPaint);
      zoom.push(q.zoom);
      zoomPaint.push(q.zoomPaint);
    }
    rows.push({ cfg: cfg.label, what: `ours, ${kind}: setTree + first draw`, frames, ...stat(set) });
    rows.push({ cfg: cfg.label, what: `ours, ${kind}: to 2nd animation frame`, frames, ...stat(paint) });
    rows.push({ cfg: cfg.label, what: `ours, ${kind}: search highlight`, frames, ...stat(search) });
    rows.push({ cfg: cfg.label, what: `ours, ${kind}: search to 2nd frame`, frames, ...stat(searchPaint) });
    rows.push({ cfg: cfg.label, what: `ours, ${kind}: zoom redraw`, frames, ...stat(zoom) });
    rows.push({ cfg: cfg.label, what: `ours, ${kind}: zoom to 2nd frame`, frames, ...stat(zoomPaint) });
  }
  if (!shape) {
    shape = await page.evaluate(() => {
      const f = document.getElementById('box').flame;
      let maxDepth = 0;
      for (let i = 0; i < f.n; i++) if (f.depth[i] > maxDepth) maxDepth = f.depth[i];
      return { nodes: f.n, names: f.names.length, modules: f.modules.length - 1, maxDepth };
    });
  }

  const first = await page.evaluate(() => window.bench.peer());
  if (!first) {
    peerMissing = true;
  } else {
    const call = [], paint = [];
    let frames = 0;
    for (let i = 0; i < RUNS; i++) {
      const r = await page.evaluate(() => window.bench.peer());
      call.push(r.call);
      paint.push(r.paint);
      frames = r.frames;
    }
    rows.push({ cfg: cfg.label, what: 'peer d3-flame-graph 5.0.0 (SVG): call', frames, ...stat(call) });
    rows.push({ cfg: cfg.label, what: 'peer d3-flame-graph 5.0.0 (SVG): to 2nd animation frame', frames, ...stat(paint) });
  }
  if (errors.length) throw new Error('page: ' + errors.join('; '));
  await ctx.close();
}
const version = browser.version();
await browser.close();
server.close();

let cpu = '';
try {
  cpu = execFileSync('sh', ['-c', "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"]).toString().trim();
} catch {}
console.log(`Flamegraph rendering, Chromium ${version} headless (--disable-gpu), ${RUNS} runs each, ${cpu}, ${os.cpus().length} cores`);
console.log(`tree: ${shape.nodes} nodes, ${shape.names} names, ${shape.modules} modules, max depth ${shape.maxDepth}; goal: setTree + first draw < ${GOAL_MS} ms`);
console.log('');
console.log('| viewport | measure | frames drawn | median ms | max ms |');
console.log('| --- | --- | ---: | ---: | ---: |');
for (const r of rows) console.log(`| ${r.cfg} | ${r.what} | ${r.frames.toLocaleString('en')} | ${r.median.toFixed(1)} | ${r.max.toFixed(1)} |`);
if (peerMissing) console.log('\npeer: d3-flame-graph not loaded (bench/browser/node_modules missing?)');
const worst = Math.max(...rows.filter((r) => r.what.endsWith('setTree + first draw')).map((r) => r.max));
console.log(`load average before: ${loadBefore}, after: ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}`);
console.log(`\nworst setTree + first draw: ${worst.toFixed(1)} ms (goal < ${GOAL_MS} ms): ${worst < GOAL_MS ? 'met' : 'MISSED'}`);
process.exitCode = worst < GOAL_MS ? 0 : 1;

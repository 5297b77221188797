// Ember's dashboard in Debian's headless chromium, driven by playwright-core.
// Run by tests/integration/test_dashboard.c, which starts a collector fed by
// a real agent and passes:
//
//   node dashboard.test.mjs --url=http://127.0.0.1:PORT/ --worker=W --app=A
//        --actor=ACTOR --host=HOST --spike=S --rule=R --heap=H --web=J
//        --shots=DIR [--steps=a,b]
//
// W is a `burn` worker (burn_hot:burn_cold = 3:1) running as ACTOR, A a
// worker with versions 1.0 (shared_work, old_path) and 2.0 (shared_work,
// new_path), all on HOST. S is a `spike` worker that idles, then burns in
// spike_burn; R the rules file's rule that fires on it and captures a
// session. H leaks under the heap library. J is a Node.js service whose
// JavaScript functions were named through a source map:
// main;serveRequest;alphaWork (file /srv/app/src/alpha.ts, line 12, V8's
// name "a /srv/app/dist/app.js:1:4711") and betaWork.
//
// The steps: explore (worker list and filter, flamegraph, selects, top
// table), explore-zoom, explore-search, explore-reload (the hash restores
// the view; refresh and live), explore-range (preset, timeline brush,
// version, Back), explore-error (an API error reaches the banner),
// explore-versions (1.0 and 2.0 chosen together add up), explore-source
// (hovering J's alphaWork shows its file:line and minified name; searching
// the minified name finds it), explore-heap (H's in-use heap), compare
// (1.0 against 2.0: diff flamegraph and table; its link in a new page),
// session (started from the page, its flamegraph, downloads and link),
// session-error (a 404 reaches the banner), rules (the rule editor: the
// file's rule read-only, a bad rule's 400 sentence beside the form, a rule
// added and deleted), alerts (R's firing alert in the list; its timeline,
// diff flamegraph with spike_burn, what changed, and its capture's
// flamegraph), alert-marker (the alert on Explore's timeline, which leads
// to it), alert-link (the alert's own link, as webhooks carry it, in a new
// page). --steps runs only the steps named (to work on one view). A failing
// step saves DIR/failed-<step>.png and the run goes on with the next view
// (steps that start from a failed one are skipped), so one run tells every
// broken view. A full-page screenshot of each view goes to DIR
// (explore.png, explore-zoom.png, explore-search.png, explore-source.png,
// explore-heap.png, compare.png, session.png, rules.png, alerts.png). Exit
// status 0 only when every step passed and the page threw nothing.
import assert from 'node:assert/strict';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { chromium } from 'playwright-core';

const args = Object.fromEntries(
  process.argv.slice(2).map((a) => {
    const m = /^--([a-z]+)=(.*)$/.exec(a);
    if (!m) throw new Error(`unknown argument ${a}`);
    return [m[1], m[2]];
  }),
);
for (const k of ['url', 'worker', 'app', 'actor', 'host', 'spike', 'rule', 'heap', 'web', 'shots']) {
  if (!args[k]) {
    console.error(`usage: node dashboard.test.mjs --url= --worker= --app= --actor= --host= --spike= --rule= --heap= --web= --shots= [--steps=] (missing --${k})`);
    process.exit(2);
  }
}
const base = new URL(args.url);
// The workers share the prefix the harness gives its run (`<tag>-`).
const prefix = args.worker.slice(0, args.worker.lastIndexOf('-') + 1);
await mkdir(args.shots, { recursive: true });

const t0 = Date.now();
const log = (...a) => console.log(`[${((Date.now() - t0) / 1000).toFixed(1)}s]`, ...a);
const tid = (id) => `[data-testid="${id}"]`;

const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  headless: true,
  // The machine's network is closed: keep chromium from reaching out.
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
context.setDefaultTimeout(15000);
const page = await context.newPage();

// Everything the page says went wrong. Page errors (uncaught exceptions,
// unhandled rejections) fail the run; so do requests to the collector that
// fail outright or answer 5xx. Console errors and 4xx answers are printed.
const pageErrors = [];
const consoleErrors = [];
const badRequests = [];
const notes = [];
function watch(p) {
  p.on('pageerror', (e) => pageErrors.push(`${e.name}: ${e.message}\n${e.stack ?? ''}`));
  p.on('console', (m) => {
    if (m.type() === 'error') consoleErrors.push(`${m.text()} (${m.location().url ?? ''})`);
  });
  p.on('requestfailed', (r) => {
    const why = r.failure()?.errorText ?? '';
    // The UI aborts fetches it no longer needs (a newer selection): fine.
    if (why.includes('ERR_ABORTED')) return;
    badRequests.push(`${r.method()} ${r.url()}: ${why}`);
  });
  p.on('response', (r) => {
    if (r.status() >= 500) badRequests.push(`${r.request().method()} ${r.url()}: ${r.status()}`);
    else if (r.status() >= 400) notes.push(`${r.request().method()} ${r.url()}: ${r.status()}`);
  });
}
watch(page);

// --- helpers ---------------------------------------------------------------

async function shot(name) {
  const file = path.join(args.shots, name);
  await page.screenshot({ path: file, fullPage: true });
  log(`screenshot ${file}`);
}

// Poll fn(arg) in the page until it returns something truthy; the failure
// names what was awaited and the last value seen.
async function until(what, fn, arg, timeout = 20000) {
  const end = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      last = await page.evaluate(fn, arg);
      if (last) return last;
    } catch (e) {
      last = `threw ${e.message.split('\n')[0]}`;
    }
    if (Date.now() > end) {
      throw new Error(`timed out after ${timeout} ms waiting for ${what} (last: ${JSON.stringify(last)})`);
    }
    await page.waitForTimeout(150);
  }
}

// Poll get() (in node) until check(value) holds; returns the value.
async function poll(what, get, check, timeout = 20000) {
  const end = Date.now() + timeout;
  for (;;) {
    const v = await get();
    if (check(v)) return v;
    if (Date.now() > end) {
      throw new Error(`timed out after ${timeout} ms waiting for ${what} (last: ${JSON.stringify(v)})`);
    }
    await page.waitForTimeout(150);
  }
}

// The first cell's own text of each row of `sel` (a module name after the
// function name is a child element, left out).
const firstCells = (sel) => page.locator(`${sel} tr`).evaluateAll((rs) =>
  rs.map((r) => (r.cells[0]?.firstChild?.textContent ?? '').trim()));

// The drawn frames of a flame container ([data-testid=ID]).
async function frames(id) {
  return page.evaluate((sel) => {
    const el = document.querySelector(sel);
    if (!el || !el.flame || typeof el.flame.frames !== 'function') return null;
    return el.flame.frames().map((f) => ({ name: f.name, x: f.x, y: f.y, w: f.w, h: f.h,
      depth: f.depth, self: f.self, total: f.total }));
  }, tid(id));
}

// Wait until flame container ID has drawn frames named by every entry of
// `names`; returns the frames.
async function flameWith(id, names, timeout = 20000) {
  await until(`${id} to draw ${names.join(', ')}`, ({ sel, names: want }) => {
    const el = document.querySelector(sel);
    if (!el || !el.flame) return false;
    const got = new Set(el.flame.frames().map((f) => f.name));
    return want.every((n) => got.has(n));
  }, { sel: tid(id), names }, timeout);
  return frames(id);
}

// The view has finished loading (the global status line is empty again)
// and shows no API error.
async function settled() {
  await poll('the status line to clear', async () => (await page.locator(tid('status')).textContent())?.trim(),
    (t) => t === '');
  await noVisibleError();
}

// No visible API error on the page.
async function noVisibleError() {
  const err = page.locator(tid('error'));
  if ((await err.count()) === 0) return;
  const visible = await err.first().isVisible();
  const text = (await err.first().textContent())?.trim() ?? '';
  assert.ok(!visible || text === '', `the error element shows: ${text}`);
}

async function options(id) {
  return page.locator(`${tid(id)} option`).evaluateAll((os) => os.map((o) => o.value));
}

async function waitOption(id, value) {
  await until(`${id} to offer ${value}`, ({ sel, value: v }) =>
    [...document.querySelectorAll(`${sel} option`)].some((o) => o.value === v),
  { sel: tid(id), value });
}

const hash = () => page.evaluate(() => decodeURIComponent(location.hash));

const results = [];
const only = args.steps ? new Set(args.steps.split(',')) : null;
// Run step `name`; `needs` names a step whose state it starts from, and
// when that one failed this one is reported as skipped, not run.
async function step(name, fn, needs) {
  if (only && !only.has(name)) return;
  const s = Date.now();
  log(`--- ${name}`);
  if (needs && only && !only.has(needs)) needs = null;
  if (needs && !results.some((r) => r[0] === needs && r[1] === 'ok')) {
    results.push([name, 'SKIPPED', 0]);
    log(`SKIPPED ${name}: it starts from ${needs}, which failed`);
    return;
  }
  try {
    await fn();
    results.push([name, 'ok', Date.now() - s]);
    log(`ok ${name} (${Date.now() - s} ms)`);
  } catch (e) {
    results.push([name, 'FAILED', Date.now() - s]);
    log(`FAILED ${name}: ${e.stack ?? e}`);
    await page.screenshot({ path: path.join(args.shots, `failed-${name}.png`), fullPage: true })
      .catch(() => {});
  }
}

// --- explore ---------------------------------------------------------------

await step('explore', async () => {
  await page.goto(base.href);
  await page.locator(tid('nav-explore')).click();
  // The worker list shows the test's workers, and the search filters it.
  await page.locator(tid('worker-search')).fill(prefix);
  const items = page.locator(`${tid('worker-list')} ${tid('worker-item')}`);
  await until(`worker-list to show ${args.worker} and ${args.app}`, ({ sel, want }) => {
    const texts = [...document.querySelectorAll(sel)].map((e) => e.textContent);
    return want.every((w) => texts.some((t) => t.includes(w)));
  }, { sel: `${tid('worker-list')} ${tid('worker-item')}`, want: [args.worker, args.app] });
  const shown = await items.allTextContents();
  assert.ok(shown.every((t) => t.includes(prefix)),
    `worker-search "${prefix}" leaves other workers: ${JSON.stringify(shown)}`);
  await page.locator(tid('worker-search')).fill(`${prefix}no-such-worker`);
  await poll('worker-search to leave no worker', () => items.count(), (n) => n === 0);
  await page.locator(tid('worker-search')).fill(args.worker);
  await until('worker-search to leave only the burn worker', ({ sel, w }) => {
    const texts = [...document.querySelectorAll(sel)].map((e) => e.textContent);
    return texts.length === 1 && texts[0].includes(w);
  }, { sel: `${tid('worker-list')} ${tid('worker-item')}`, w: args.worker });
  await items.filter({ hasText: args.worker }).first().click();

  // The selection is in the URL and the flamegraph has burn's functions.
  await until('the hash to name the worker', (w) =>
    location.hash.startsWith('#/explore') && decodeURIComponent(location.hash).includes(`worker=${w}`),
  args.worker);
  const fr = await flameWith('flame', ['main', 'burn_loop', 'burn_hot', 'burn_cold']);
  const hot = fr.find((f) => f.name === 'burn_hot');
  const cold = fr.find((f) => f.name === 'burn_cold');
  const ratio = hot.total / cold.total;
  log(`flame: ${fr.length} frames, burn_hot:burn_cold = ${ratio.toFixed(2)}`);
  // About 3 (burn's split); loose, as the first seconds hold few samples.
  assert.ok(ratio > 1.5 && ratio < 6, `burn_hot:burn_cold is ${ratio}, not about 3`);
  assert.ok(hot.w > cold.w, 'burn_hot is drawn narrower than burn_cold');
  const nodes = Number(await page.locator(tid('flame')).getAttribute('data-nodes'));
  assert.ok(nodes >= 4, `data-nodes is ${nodes}`);
  await page.locator(`${tid('flame')} ${tid('flame-canvas')}`).waitFor();

  // The selects offer this worker's labels.
  await waitOption('version-select', '1.0');
  await waitOption('host-select', args.host);
  await waitOption('actor-select', args.actor);
  for (const id of ['type-select', 'range-select']) {
    assert.ok((await options(id)).length >= 2, `${id} offers fewer than 2 choices`);
  }
  await page.locator(tid('timeline')).waitFor();

  // The top table sorts by each header (a second click on the sorted
  // column reverses it): by self, burn_hot first; by name, in order.
  const sortBy = async (key, what, check) => {
    await page.locator(`${tid('top-table')} th[data-sort="${key}"]`).click();
    await poll(what, () => firstCells(`${tid('top-table')} tbody`), (n) => n.length > 1 && check(n));
  };
  await sortBy('total', 'top-table sorted by total', (n) => n.includes('burn_hot'));
  await sortBy('self', 'top-table to list burn_hot first by self',
    (n) => n[0] === 'burn_hot' && n.includes('burn_cold'));
  const inOrder = (n, dir) => n.every((x, i) => i === 0 || dir * n[i - 1].localeCompare(x) <= 0);
  await sortBy('name', 'top-table sorted by name', (n) => inOrder(n, 1) || inOrder(n, -1));
  await settled();
  await shot('explore.png');
});

await step('explore-zoom', async () => {
  const fr = await flameWith('flame', ['burn_hot']);
  const hot = fr.find((f) => f.name === 'burn_hot');
  const canvas = page.locator(`${tid('flame')} ${tid('flame-canvas')}`);
  // The explore step clicked the top table's headers, which scrolled the
  // page down: bring the flamegraph back before clicking by coordinates.
  await canvas.evaluate((c) => c.scrollIntoView({ block: 'start' }));
  await canvas.click({ position: { x: hot.x + hot.w / 2, y: hot.y + hot.h / 2 } });
  await until('data-zoom to end with burn_hot', (sel) =>
    (document.querySelector(sel).getAttribute('data-zoom') ?? '').endsWith('burn_hot'), tid('flame'));
  const zoomed = (await frames('flame')).find((f) => f.name === 'burn_hot');
  const cw = (await canvas.boundingBox()).width;
  assert.ok(zoomed && zoomed.w >= 0.95 * cw,
    `zoomed burn_hot is ${zoomed?.w} px wide on a ${cw} px canvas`);
  assert.ok(!(await frames('flame')).some((f) => f.name === 'burn_cold' && f.w >= 1),
    'burn_cold is still drawn after zooming into burn_hot');
  await settled();
  await shot('explore-zoom.png');
  await page.keyboard.press('Escape');
  await until('Escape to reset the zoom', (sel) =>
    document.querySelector(sel).getAttribute('data-zoom') === '', tid('flame'));
}, 'explore');

await step('explore-search', async () => {
  // `/` focuses the search box (from anywhere but an input).
  await page.evaluate(() => document.activeElement?.blur());
  await page.keyboard.press('/');
  await until('"/" to focus flame-search', (sel) =>
    document.activeElement === document.querySelector(sel), tid('flame-search'));
  await page.locator(tid('flame-search')).fill('burn_cold');
  await until('data-search-matches >= 1', (sel) =>
    Number(document.querySelector(sel).getAttribute('data-search-matches')) >= 1, tid('flame'));
  await settled();
  await shot('explore-search.png');
  await page.locator(tid('flame-search')).fill('no_such_function_anywhere');
  await until('data-search-matches to be 0', (sel) =>
    document.querySelector(sel).getAttribute('data-search-matches') === '0', tid('flame'));
  await page.locator(tid('flame-search')).fill('');
}, 'explore');

await step('explore-reload', async () => {
  // The hash alone restores the view.
  const h = await hash();
  await page.reload();
  await flameWith('flame', ['burn_hot', 'burn_cold']);
  assert.equal(await hash(), h);
  // Refresh asks the server again and keeps the view; live goes in the URL.
  const again = page.waitForResponse((r) => r.url().includes('/api/v1/profile') && r.status() === 200);
  await page.locator(tid('refresh')).click();
  await again;
  await flameWith('flame', ['burn_hot', 'burn_cold']);
  await settled();
  assert.equal(await hash(), h);
  await page.locator(tid('live')).check();
  await until('the hash to hold live=1', () => location.hash.includes('live=1'));
  await page.locator(tid('live')).uncheck();
  await until('the hash to drop live', () => !location.hash.includes('live='));
}, 'explore');

await step('explore-range', async () => {
  // A preset, then a brushed range on the timeline, then back.
  await page.locator(tid('range-select')).selectOption('5m');
  await until('the hash to hold range=5m', () => location.hash.includes('range=5m'));
  await flameWith('flame', ['burn_hot', 'burn_cold']);
  const canvas = page.locator(`${tid('timeline')} canvas`).first();
  await until('the timeline to draw', (sel) => {
    const c = document.querySelector(`${sel} canvas`);
    return c && c.width > 0 && c.height > 0;
  }, tid('timeline'));
  await canvas.evaluate((c) => c.scrollIntoView({ block: 'center' }));
  const box = await canvas.boundingBox();
  const y = box.y + box.height / 2;
  // The last two fifths of 5 minutes hold every window of this run.
  await page.mouse.move(box.x + box.width * 0.6, y);
  await page.mouse.down();
  await page.mouse.move(box.x + box.width * 0.8, y, { steps: 4 });
  await page.mouse.move(box.x + box.width - 1, y, { steps: 4 });
  await page.mouse.up();
  const h = await until('the brush to put from and to in the hash', () => {
    const p = new URLSearchParams(location.hash.split('?')[1] ?? '');
    return p.get('from') && p.get('to') && location.hash;
  });
  log(`brushed: ${h}`);
  await flameWith('flame', ['burn_hot', 'burn_cold']);
  await settled();
  await canvas.dblclick({ position: { x: box.width / 2, y: box.height / 2 } });
  await until('a double-click to drop the brushed range', () => !/[?&]from=/.test(location.hash));
  await flameWith('flame', ['burn_hot', 'burn_cold']);
  // Narrowing to one version keeps the profile (it has only 1.0).
  await page.locator(tid('version-select')).selectOption('1.0');
  await until('the hash to hold version=1.0', () => location.hash.includes('version=1.0'));
  await flameWith('flame', ['burn_hot', 'burn_cold']);
  await settled();
  // Back undoes the choice, in the URL and in the select.
  await page.goBack();
  await until('Back to drop version=1.0', () => !location.hash.includes('version=1.0'));
  await poll('version-select to follow Back', () => page.locator(tid('version-select')).inputValue(),
    (v) => v === '');
  await flameWith('flame', ['burn_hot', 'burn_cold']);
  await settled();
}, 'explore');

await step('explore-error', async () => {
  // An API error reaches the banner (so the checks that it stays hidden
  // elsewhere mean something), and the banner can be dismissed.
  await page.goto(new URL(`#/explore?worker=${encodeURIComponent(args.worker)}&range=bogus`, base).href);
  const banner = page.locator(tid('error'));
  await banner.waitFor({ state: 'visible' });
  const text = (await banner.textContent()).trim();
  log(`error banner: ${text}`);
  assert.match(text, /bogus/, 'the banner does not quote the bad value');
  await banner.locator('button').first().click();
  await banner.waitFor({ state: 'hidden' });
  await page.goto(new URL(`#/explore?worker=${encodeURIComponent(args.worker)}`, base).href);
  await flameWith('flame', ['burn_hot']);
  await settled();
}, 'explore');

await step('explore-versions', async () => {
  // Versions chosen together add up: 1.0 alone has old_path and no
  // new_path; 1.0 and 2.0 (one Ctrl-click more) have both.
  const app = encodeURIComponent(args.app);
  await page.goto(new URL(`#/explore?worker=${app}&version=1.0`, base).href);
  await flameWith('flame', ['shared_work', 'old_path']);
  await settled();
  const only1 = (await frames('flame')).map((f) => f.name);
  assert.ok(!only1.includes('new_path'), 'version 1.0 alone shows new_path');
  await waitOption('version-select', '2.0');
  await page.locator(tid('version-select')).selectOption(['1.0', '2.0']);
  await until('the hash to hold both versions', () => {
    const p = new URLSearchParams(location.hash.split('?')[1] ?? '');
    const v = p.getAll('version');
    return v.length === 2 && v.includes('1.0') && v.includes('2.0');
  });
  await flameWith('flame', ['shared_work', 'old_path', 'new_path']);
  await settled();
  const pprof = await page.locator(tid('download-pprof')).getAttribute('href');
  assert.ok(pprof.includes('version=1.0') && pprof.includes('version=2.0'),
    `the pprof link does not carry both versions: ${pprof}`);
}, 'explore');

// --- source locations (issue 16) -----------------------------------------

await step('explore-source', async () => {
  // A JavaScript function named through a source map: the hover shows
  // where its source is and the name V8 runs it under; a native frame
  // without them shows neither.
  await page.goto(new URL(`#/explore?worker=${encodeURIComponent(args.web)}`, base).href);
  await flameWith('flame', ['main', 'serveRequest', 'alphaWork', 'betaWork']);
  await settled();
  const fr = await page.evaluate((sel) => document.querySelector(sel).flame.frames()
    .map((f) => ({ name: f.name, x: f.x, y: f.y, w: f.w, h: f.h, file: f.file, line: f.line, generated: f.generated })),
  tid('flame'));
  const alpha = fr.find((f) => f.name === 'alphaWork');
  const main = fr.find((f) => f.name === 'main');
  assert.deepEqual([alpha.file, alpha.line, alpha.generated],
    ['/srv/app/src/alpha.ts', 12, 'a /srv/app/dist/app.js:1:4711'], `frames() of alphaWork: ${JSON.stringify(alpha)}`);
  const canvas = page.locator(`${tid('flame')} ${tid('flame-canvas')}`);
  const tip = page.locator(`${tid('flame')} ${tid('flame-tooltip')}`);
  const tipLines = () => tip.evaluate((t) => [...t.children].map((d) => d.textContent));
  await canvas.evaluate((c) => c.scrollIntoView({ block: 'start' }));
  await canvas.hover({ position: { x: alpha.x + alpha.w / 2, y: alpha.y + alpha.h / 2 } });
  await tip.waitFor({ state: 'visible' });
  let lines = await poll('the tooltip to name alphaWork', tipLines, (l) => l[0] === 'alphaWork');
  log(`tooltip: ${JSON.stringify(lines)}`);
  assert.ok(lines.includes('/srv/app/src/alpha.ts:12'), `the tooltip has no file:line: ${JSON.stringify(lines)}`);
  assert.ok(lines.includes('minified: a /srv/app/dist/app.js:1:4711'),
    `the tooltip has no minified name: ${JSON.stringify(lines)}`);
  assert.ok(lines.some((l) => l.startsWith('total ')), `the tooltip lost its totals: ${JSON.stringify(lines)}`);
  await shot('explore-source.png');
  await canvas.hover({ position: { x: main.x + main.w / 2, y: main.y + main.h / 2 } });
  lines = await poll('the tooltip to name main', tipLines, (l) => l[0] === 'main');
  assert.ok(!lines.some((l) => l.startsWith('minified:') || l.includes('/srv/app/src/')),
    `main's tooltip shows another frame's source: ${JSON.stringify(lines)}`);
  await page.mouse.move(0, 0);
  await tip.waitFor({ state: 'hidden' });

  // The minified name (as a stack trace of the bundle gives it) finds the
  // function.
  await page.locator(tid('flame-search')).fill('app.js:1:4711');
  await until('data-search-matches to be 1', (sel) =>
    document.querySelector(sel).getAttribute('data-search-matches') === '1', tid('flame'));
  const hits = await page.evaluate((sel) => document.querySelector(sel).flame.frames()
    .filter((f) => f.match).map((f) => f.name), tid('flame'));
  assert.deepEqual(hits, ['alphaWork'], `searching the minified name matches ${JSON.stringify(hits)}`);
  await page.locator(tid('flame-search')).fill('');
  await settled();
});

// --- compare ---------------------------------------------------------------

// --- the in-use heap (issue 15) -------------------------------------------

await step('explore-heap', async () => {
  // The leaking worker's in-use heap: the timeline draws bytes over time,
  // the growth table puts the leaking function first, the flamegraph
  // holds it.
  await page.goto(base.href);
  await page.locator(tid('nav-explore')).click();
  await page.locator(tid('worker-search')).fill(args.heap);
  const items = page.locator(`${tid('worker-list')} ${tid('worker-item')}`);
  await poll(`worker-list to show ${args.heap}`, () => items.count(), (n) => n >= 1);
  await items.filter({ hasText: args.heap }).first().click();
  await waitOption('type-select', 'inuse_bytes');
  await page.locator(tid('type-select')).selectOption('inuse_bytes');
  await until('the hash to hold type=inuse_bytes', () => location.hash.includes('type=inuse_bytes'));
  const tl = await until('the timeline to draw the in-use heap', (sel) => {
    const el = document.querySelector(sel);
    return el && el.dataset.unit === 'bytes' && Number(el.dataset.max) > 0 && el.textContent.includes('In-use heap')
      ? { max: Number(el.dataset.max) } : false;
  }, tid('timeline'));
  log(`heap timeline: up to ${(tl.max / 1048576).toFixed(1)} MiB`);
  await until('the growth table to list leak_step first', (sel) => {
    const panel = document.querySelector(sel);
    const row = panel && !panel.hidden && panel.querySelector('tbody tr');
    return row ? row.cells[0].firstChild.textContent.trim() === 'leak_step' : false;
  }, tid('growth-panel'));
  await flameWith('flame', ['leak_step']);
  await settled();
  await shot('explore-heap.png');
  // Back to CPU: the timeline says cores again.
  await page.locator(tid('type-select')).selectOption('cpu');
  await until('the timeline to draw CPU again', (sel) => document.querySelector(sel)?.dataset.unit === 'cores', tid('timeline'));
});

await step('compare', async () => {
  await page.locator(tid('nav-compare')).click();
  await until('the hash to be #/compare', () => location.hash.startsWith('#/compare'));
  await waitOption('compare-worker', args.app);
  await page.locator(tid('compare-worker')).selectOption(args.app);
  await waitOption('compare-a-version', '1.0');
  await waitOption('compare-b-version', '2.0');
  await page.locator(tid('compare-a-version')).selectOption('1.0');
  await page.locator(tid('compare-b-version')).selectOption('2.0');
  await until('the hash to hold both versions', (app) => {
    const h = decodeURIComponent(location.hash);
    return h.includes(`worker=${app}`) && h.includes('a.version=1.0') && h.includes('b.version=2.0');
  }, args.app);
  const fr = await flameWith('diff-flame', ['main', 'run', 'shared_work', 'new_path', 'old_path']);
  log(`diff-flame: ${fr.length} frames`);
  // v2 adds new_path (a larger self share in B) and drops old_path.
  const group = (g) => firstCells(`${tid('diff-table')} ${tid(g)}`);
  await poll('diff-table to list new_path among the regressions', () => group('regressions'),
    (n) => n.includes('new_path'));
  await poll('diff-table to list old_path among the improvements', () => group('improvements'),
    (n) => n.includes('old_path'));
  await settled();
  await shot('compare.png');
  // The hash alone opens the same comparison in a new page.
  const link = page.url();
  const fresh = await context.newPage();
  watch(fresh);
  try {
    await fresh.goto(link);
    await fresh.waitForFunction((sel) => {
      const el = document.querySelector(sel);
      return el && el.flame && el.flame.frames().some((f) => f.name === 'new_path');
    }, tid('diff-flame'), { timeout: 20000 });
    assert.equal(await fresh.locator(tid('compare-a-version')).inputValue(), '1.0');
    assert.equal(await fresh.locator(tid('compare-b-version')).inputValue(), '2.0');
  } finally {
    await fresh.close();
  }
});

// --- sessions --------------------------------------------------------------

await step('session', async () => {
  await page.locator(tid('nav-sessions')).click();
  await until('the hash to be #/sessions', () => location.hash.startsWith('#/sessions'));
  await page.locator(tid('session-kind')).selectOption('actor');
  await page.locator(tid('session-name')).fill(args.actor);
  await page.locator(tid('session-type')).selectOption('cpu');
  await page.locator(tid('session-duration')).fill('2000');
  await page.locator(tid('session-start')).click();
  const id = await until('the hash to name the new session', () =>
    /^#\/sessions\/([0-9a-f]+)/.exec(location.hash)?.[1]);
  log(`session ${id}`);
  const state = await until('session-state to say done', (sel) => {
    const t = document.querySelector(sel)?.textContent ?? '';
    if (/failed|expired|cancelled/i.test(t)) return `ended: ${t}`;
    return /done/i.test(t) && t;
  }, tid('session-state'), 40000);
  assert.ok(!state.startsWith('ended:'), `the session did not complete: ${state}`);
  await flameWith('session-flame', ['burn_hot', 'burn_cold']);
  await until('session-list to show the session', ({ sel, actor }) =>
    [...document.querySelectorAll(`${sel} tr, ${sel} li, ${sel} [data-testid]`)]
      .some((r) => r.textContent.includes(actor)), { sel: tid('session-list'), actor: args.actor });
  for (const [dl, format] of [['dl-pprof', 'pprof'], ['dl-folded', 'folded'],
    ['dl-speedscope', 'speedscope']]) {
    const href = await page.locator(tid(dl)).getAttribute('href');
    const want = `/api/v1/sessions/${id}/profile?format=${format}`;
    assert.ok(href && new URL(href, base).href.endsWith(want), `${dl} links ${href}, not ${want}`);
  }
  const folded = await page.request.get(new URL(`/api/v1/sessions/${id}/profile?format=folded`, base).href);
  assert.equal(folded.status(), 200);
  assert.match(await folded.text(), /burn_hot/);
  const pprof = await page.request.get(new URL(await page.locator(tid('dl-pprof')).getAttribute('href'), base).href);
  assert.equal(pprof.status(), 200);
  assert.ok((await pprof.body()).length > 100, 'the pprof download is nearly empty');
  await settled();
  await shot('session.png');
  // The session's own link opens it in a new page.
  const fresh = await context.newPage();
  watch(fresh);
  try {
    await fresh.goto(new URL(`#/sessions/${id}`, base).href);
    await fresh.waitForFunction((sel) => /done/i.test(document.querySelector(sel)?.textContent ?? ''),
      tid('session-state'), { timeout: 20000 });
    await fresh.waitForFunction((sel) => {
      const el = document.querySelector(sel);
      return el && el.flame && el.flame.frames().some((f) => f.name === 'burn_hot');
    }, tid('session-flame'), { timeout: 20000 });
  } finally {
    await fresh.close();
  }
});

await step('session-error', async () => {
  // A session nobody can run: the API's 404 sentence reaches the banner.
  await page.goto(new URL('#/sessions', base).href);
  const nobody = `${prefix}nobody`;
  await page.locator(tid('session-kind')).selectOption('actor');
  await page.locator(tid('session-name')).fill(nobody);
  await page.locator(tid('session-duration')).fill('1000');
  await page.locator(tid('session-start')).click();
  const banner = page.locator(tid('error'));
  await banner.waitFor({ state: 'visible' });
  const text = (await banner.textContent()).trim();
  log(`error banner: ${text}`);
  assert.ok(text.includes(nobody), `the banner does not name ${nobody}: ${text}`);
  await banner.locator('button').first().click();
  await banner.waitFor({ state: 'hidden' });
});

// --- alerts ----------------------------------------------------------------

// The rules as the API lists them.
async function apiRules() {
  const r = await page.request.get(new URL('/api/v1/rules', base).href);
  assert.equal(r.status(), 200, `GET /api/v1/rules: ${r.status()}`);
  return (await r.json()).rules;
}

const ruleRow = (name) => page.locator(`${tid('rule-list')} ${tid('rule-row')}[data-name="${name}"]`);

await step('rules', async () => {
  await page.goto(base.href);
  await page.locator(tid('nav-alerts')).click();
  await until('the hash to be #/alerts', () => location.hash.startsWith('#/alerts'));
  await page.locator(tid('tab-rules')).click();
  await until('the hash to hold tab=rules', () => location.hash.includes('tab=rules'));
  // The rules file's rule is listed, read-only.
  await ruleRow(args.rule).waitFor();
  assert.equal(await ruleRow(args.rule).getAttribute('data-source'), 'file');
  assert.equal(await ruleRow(args.rule).locator(tid('rule-delete')).count(), 0,
    'the rules file\'s rule has a delete button');

  // A bad rule: the server's sentence, naming the field, beside the form.
  const bad = `${prefix}bad`;
  await page.locator(tid('rule-name')).fill(bad);
  await page.locator(tid('rule-worker')).fill(args.app);
  await page.locator(tid('rule-kind')).selectOption('above');
  await page.locator(tid('rule-above')).fill('1');
  await page.locator(tid('rule-for')).fill('3x');
  await page.locator(tid('rule-add')).click();
  const error = page.locator(tid('rule-error'));
  await error.waitFor({ state: 'visible' });
  const text = (await error.textContent()).trim();
  log(`rule-error: ${text}`);
  assert.ok(text.includes('"for"') && text.includes('3x'), `the form's error does not name "for" and 3x: ${text}`);
  assert.ok(!(await apiRules()).some((r) => r.name === bad), `the bad rule ${bad} was stored`);
  await noVisibleError();

  // A good one, of every part of the form: it appears, as the API's own.
  const name = `${prefix}edit`;
  await page.locator(tid('rule-name')).fill(name);
  await page.locator(tid('rule-kind')).selectOption('baseline');
  await page.locator(tid('rule-factor')).fill('4');
  await page.locator(tid('rule-period')).fill('1h');
  await page.locator(tid('rule-group-by')).selectOption('host');
  await page.locator(tid('rule-for')).fill('1m');
  await page.locator(tid('rule-capture')).check();
  await page.locator(tid('rule-capture-ms')).fill('2000');
  await page.locator(tid('rule-add')).click();
  await ruleRow(name).waitFor();
  assert.ok(await error.isHidden(), 'the form still shows an error after a good rule');
  assert.equal(await ruleRow(name).getAttribute('data-source'), 'api');
  const stored = (await apiRules()).find((r) => r.name === name);
  log(`stored: ${JSON.stringify(stored)}`);
  assert.ok(stored && stored.worker === args.app && stored.baseline?.factor === 4 &&
    stored.group_by === 'host' && stored.for === '1m' && stored.capture?.duration_ms === 2000,
  `the stored rule is not the form's: ${JSON.stringify(stored)}`);
  await settled();
  await shot('rules.png');

  // Deleted (the button asks once more): it goes, from the page and the API.
  await ruleRow(name).locator(tid('rule-delete')).click();
  await ruleRow(name).locator(tid('rule-delete')).click();
  await ruleRow(name).waitFor({ state: 'detached' });
  assert.ok(!(await apiRules()).some((r) => r.name === name), `${name} is still stored`);
  await settled();
});

let alertId = null;

await step('alerts', async () => {
  await page.goto(new URL('#/alerts', base).href);
  // The spike fires R within its `for` and a window or two; the list
  // reloads itself every 10 s.
  const row = page.locator(`${tid('alert-list')} ${tid('alert-row')}[data-rule="${args.rule}"][data-state="firing"]`);
  await row.first().waitFor({ timeout: 120000 });
  alertId = await row.first().getAttribute('data-id');
  log(`alert ${alertId}`);
  const firstRow = page.locator(`${tid('alert-list')} ${tid('alert-row')}`).first();
  assert.equal(await firstRow.getAttribute('data-state'), 'firing', 'the list does not put firing alerts first');
  assert.match(await row.first().locator(tid('alert-value')).textContent(), /\/ 0\.10 cores/);

  await row.first().click();
  await until('the hash to name the alert', (id) => location.hash.startsWith(`#/alerts/${id}`), alertId);
  await until('alert-detail-state to say firing', (sel) =>
    /firing/i.test(document.querySelector(sel)?.textContent ?? ''), tid('alert-detail-state'));
  // The timeline: the threshold drawn, CPU in it.
  await until('alert-timeline to draw with the threshold', (sel) => {
    const el = document.querySelector(sel);
    const c = el?.querySelector('canvas');
    return el && el.dataset.threshold === '0.1' && c && c.width > 0;
  }, tid('alert-timeline'));
  // The diff of the spike against the minutes before: spike_burn, first in
  // what changed.
  await flameWith('alert-diff-flame', ['spike_burn']);
  const changed = await firstCells(`${tid('alert-top')} tbody`);
  log(`what changed: ${changed.join(', ')}`);
  assert.equal(changed[0], 'spike_burn', `what changed does not name spike_burn first: ${changed}`);
  // The capture: done, and its flamegraph holds the burning function.
  const state = await until('alert-capture-state to say done', (sel) => {
    const t = document.querySelector(sel)?.textContent ?? '';
    if (/failed|expired|cancelled/i.test(t)) return `ended: ${t}`;
    return /done/i.test(t) && t;
  }, tid('alert-capture-state'), 60000);
  assert.ok(!state.startsWith('ended:'), `the capture did not complete: ${state}`);
  await flameWith('alert-capture-flame', ['spike_burn']);
  await settled();
  await shot('alerts.png');
}, 'rules');

await step('alert-marker', async () => {
  // The alert on Explore's timeline, and from there back to it.
  await page.goto(new URL(`#/explore?worker=${encodeURIComponent(args.spike)}&range=15m`, base).href);
  await flameWith('flame', ['spike_burn']);
  const link = page.locator(`${tid('timeline')} ${tid('timeline-alert')}[data-id="${alertId}"]`);
  await link.waitFor();
  await settled();
  await link.click();
  await until('the marker to open the alert', (id) => location.hash.startsWith(`#/alerts/${id}`), alertId);
  await flameWith('alert-diff-flame', ['spike_burn']);
  await settled();
}, 'alerts');

await step('alert-link', async () => {
  // The alert's own link (a webhook's generatorURL) in a new page.
  const fresh = await context.newPage();
  watch(fresh);
  try {
    await fresh.goto(new URL(`#/alerts/${alertId}`, base).href);
    await fresh.waitForFunction((sel) => {
      const el = document.querySelector(sel);
      return el && el.flame && el.flame.frames().some((f) => f.name === 'spike_burn');
    }, tid('alert-diff-flame'), { timeout: 20000 });
    await fresh.waitForFunction((sel) => {
      const el = document.querySelector(sel);
      return el && el.flame && el.flame.frames().some((f) => f.name === 'spike_burn');
    }, tid('alert-capture-flame'), { timeout: 20000 });
  } finally {
    await fresh.close();
  }
}, 'alerts');

await browser.close();

// --- verdict ---------------------------------------------------------------

for (const n of notes) log(`note: 4xx answer: ${n}`);
for (const c of consoleErrors) log(`note: console error: ${c}`);
let failed = results.filter((r) => r[1] !== 'ok').length;
for (const e of pageErrors) {
  log(`FAILED: page error: ${e}`);
  failed++;
}
for (const r of badRequests) {
  log(`FAILED: request: ${r}`);
  failed++;
}
log('summary:');
for (const [name, verdict, ms] of results) log(`  ${verdict.padEnd(6)} ${name} (${ms} ms)`);
const passed = results.length - results.filter((r) => r[1] !== 'ok').length;
console.log(`${passed} passed, ${results.length - passed} failed`);
process.exit(failed === 0 ? 0 : 1);

// The peer of bench/bench_sourcemap.sh: Node.js's own source map support
// (node:module SourceMap, what --enable-source-maps uses), on the same map
// and the same positions: time to decode (wall and process CPU), memory it
// holds, and CPU ns per lookup (findEntry) over every function V8 named.
//
//   node --expose-gc bench/sourcemap_peer.mjs MAP POSITIONS
// POSITIONS: lines "LINE COLUMN" (1-based, as V8 writes them).
import { readFileSync } from "node:fs";
import { SourceMap } from "node:module";

const [mapPath, posPath] = process.argv.slice(2);
const positions = readFileSync(posPath, "utf8").trim().split("\n").map((l) => l.split(" ").map(Number));
const text = readFileSync(mapPath, "utf8");
globalThis.gc();
const heap0 = process.memoryUsage().heapUsed;
const cpu = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) * 1000; // ns
};
const t0 = process.hrtime.bigint(), c0 = cpu();
const sm = new SourceMap(JSON.parse(text));
sm.findEntry(0, 0); // SourceMap parses its mappings at construction; one lookup to be sure
const t1 = process.hrtime.bigint(), c1 = cpu();
globalThis.gc();
const heap1 = process.memoryUsage().heapUsed;
let found = 0;
const rounds = 20;
const c2 = cpu();
for (let r = 0; r < rounds; r++)
  for (const [line, col] of positions) if (sm.findEntry(line - 1, col - 1).originalSource) found++;
const c3 = cpu();
const per = (c3 - c2) / (rounds * positions.length);
console.log(
  `peer node:module SourceMap: decode ${(Number(t1 - t0) / 1e6).toFixed(1)} ms wall, ` +
    `${((c1 - c0) / 1e6).toFixed(1)} ms CPU (the process's: V8's collector threads too), ` +
    `holds ${((heap1 - heap0) / 1048576).toFixed(1)} MiB of V8 heap, ` +
    `${per.toFixed(0)} ns CPU per lookup (${found / rounds} of ${positions.length} found)`,
);

// A small service for Ember's source map tests (tests/integration/
// test_sourcemaps.c), bundled and minified by esbuild: it serves
// "requests" until it has used CPU_SECONDS of CPU (argv[2]), each request
// costing alphaWork three units of work and betaWork one.
import { alphaWork } from "./alpha";
import { betaWork } from "./beta";

const UNIT = 20000;

function serveRequest(sink: number[]): void {
  sink[0] += alphaWork({ rounds: 3 * UNIT });
  sink[0] += betaWork({ rounds: UNIT });
}

function serveUntil(cpuSeconds: number): number {
  const sink = [0];
  const start = process.cpuUsage();
  for (;;) {
    for (let k = 0; k < 50; k++) serveRequest(sink);
    const used = process.cpuUsage(start);
    if ((used.user + used.system) / 1e6 >= cpuSeconds) return sink[0];
  }
}

process.stdout.write(`${serveUntil(Number(process.argv[2] ?? "3"))}\n`);

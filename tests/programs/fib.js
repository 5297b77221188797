// A Node.js CPU burner for JIT symbolization tests: run with
//   node --perf-basic-prof --interpreted-frames-native-stack fib.js SECONDS
// so V8 writes /tmp/perf-PID.map and keeps frame pointers.
'use strict';

function fibonacciRecursive(n) {
  return n < 2 ? n : fibonacciRecursive(n - 1) + fibonacciRecursive(n - 2);
}

function emberBurnJs(seconds) {
  const end = Date.now() + seconds * 1000;
  let total = 0;
  while (Date.now() < end) total += fibonacciRecursive(24);
  return total;
}

const seconds = Number(process.argv[2] || 5);
console.log('ready');
emberBurnJs(seconds);

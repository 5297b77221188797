// The hot path of the test service: three times beta's work per request.
export interface Work {
  rounds: number;
}

export function alphaWork(work: Work): number {
  let acc = 7;
  for (let i = 0; i < work.rounds; i++) {
    acc = (acc * 1103515245 + i) % 2147483647;
  }
  return acc;
}

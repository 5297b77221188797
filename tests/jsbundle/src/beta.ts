// The cold path of the test service: the same loop as alpha's, a third as long.
import type { Work } from "./alpha";

export function betaWork(work: Work): number {
  let acc = 11;
  for (let i = 0; i < work.rounds; i++) {
    acc = (acc * 1103515245 + i) % 2147483647;
  }
  return acc;
}

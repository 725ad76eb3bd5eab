/** Test-side helpers: the local process group harness plus deterministic data. */
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { runScenario as run, type RunOptions, type ScenarioRun } from '../../src/launch/local-group.js';

export { joinMesh, type Mesh } from '../../src/launch/local-group.js';

const WORKER = path.join(path.dirname(fileURLToPath(import.meta.url)), 'nic-worker.js');

/** Runs a conformance scenario (test/helpers/nic-worker.ts) in N processes. */
export function runScenario(scenario: string, opts: Omit<RunOptions, 'worker'>): Promise<ScenarioRun> {
  return run(scenario, { ...opts, worker: WORKER });
}

/** A deterministic pseudo-random byte pool both sides can rebuild (xorshift32). */
export function randomPool(bytes: number, seed: number): Uint8Array {
  const out = new Uint8Array(bytes);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < bytes; i++) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    out[i] = x & 255;
  }
  return out;
}

/** Deterministic sequence of numbers in [0, 2^32). */
export function prng(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x;
  };
}

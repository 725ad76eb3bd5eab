/**
 * The memory-bandwidth floor of a one-host allreduce, measured in the launcher process (one
 * core, while no rank runs), so weft's large allreduces can be held to what the memory system
 * allows in the same run.
 *
 * Floor (row provider 'sum-kernel'): the time one rank needs to read its input and the other
 * rank's contribution, sum them and write the output, i.e. one pass of the float32 sum kernel
 * over the whole buffer (acc = acc + x: reads 2 x bytes, writes 1 x bytes), timed inside the
 * addon by `reduceKernelSeconds` at the SIMD level the ranks use. At np=2 no algorithm can
 * deliver the sum on a rank without that data having crossed the memory system once, so a
 * good shared-memory allreduce lands within a small factor of it.
 *
 * Also reported, for scale (provider 'memcpy'): one single-thread memcpy of the same bytes.
 */
import { native } from '../../src/native/binding.js';
import { dtypeCode, opCode } from '../../src/reduce/codes.js';
import { median } from '../lib/stats.js';
import { withBandwidth, type CollectiveResult } from './metrics.js';

/** Floor rows only at sizes where memory, not caches or call overhead, is what is measured. */
export const FLOOR_MIN_BYTES = 1 << 20;

/** The allreduce sizes a floor measures: from FLOOR_MIN_BYTES, whole float32 elements (as caseBytes gives them), each once, ascending. */
export function floorSizes(sizes: number[]): number[] {
  return [...new Set(sizes.filter((s) => s >= FLOOR_MIN_BYTES).map((s) => Math.floor(s / 4) * 4))].sort((a, b) => a - b);
}

/** Passes per sample: about 256 MiB of data, at least 2. */
function passes(bytes: number): number {
  return Math.max(2, Math.round((256 << 20) / bytes));
}

function row(provider: string, bytes: number, samples: number[], impl: string): CollectiveResult {
  const us = samples.map((s) => Math.round(s * 1e9) / 1e3).sort((a, b) => a - b);
  return withBandwidth({ system: 'floor', op: 'allreduce', np: 2, provider, bytes, iters: us.length, median_us: median(us), min_us: us[0], p90_us: us[Math.ceil(0.9 * us.length) - 1], impl });
}

/**
 * Sum-kernel and memcpy time for each allreduce size >= FLOOR_MIN_BYTES (bytes as caseBytes
 * gives them for allreduce: whole float32 elements), `samples` samples each.
 */
export function measureFloor(sizes: number[], samples = 5): CollectiveResult[] {
  const sum = opCode('sum');
  const f32 = dtypeCode('float32');
  if (sum === undefined || f32 === undefined) throw new Error('the addon has no float32 sum kernel');
  const out: CollectiveResult[] = [];
  for (const bytes of floorSizes(sizes)) {
    const k = passes(bytes);
    const kernel: number[] = [];
    const copy: number[] = [];
    for (let i = 0; i < samples; i++) {
      kernel.push(native.reduceKernelSeconds(sum, f32, bytes / 4, k) / k);
      copy.push(native.memcpyBandwidth(bytes, k) / k);
    }
    out.push(row('sum-kernel', bytes, kernel, `reduceKernelSeconds(sum, float32): acc += x over ${bytes} B, one core`));
    out.push(row('memcpy', bytes, copy, `memcpy of ${bytes} B, one core`));
  }
  return out;
}

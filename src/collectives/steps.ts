/**
 * What the plans of a job that spans hosts (hierarchical.ts, host-board.ts) are made of: steps,
 * each an ordinary collective call on a subgroup, run with the Promise or the blocking calls.
 */
import type { ReduceOp } from '../reduce/index.js';
import type { Deadline } from '../util/deadline.js';
import type { CollectiveOptions, Group } from './call.js';
import type { TypedArray } from './checks.js';

/** One step of a plan: `sync` picks the blocking call, else it returns the Promise one's. */
export type Step = (sync: boolean) => unknown;

/** What a step's call may take: every collective's options in one shape. */
export interface StepOptions extends CollectiveOptions {
  op?: ReduceOp;
  float?: 'float16' | 'bfloat16';
  root: number;
  output?: TypedArray;
  counts?: readonly number[];
}

/**
 * Options for one step: the call's tag, signal and reduction, what is left of its timeout,
 * and the step's root, output and counts. Built field by field in one shape: object spreads
 * here copied through the runtime and were the largest allocation of a small hierarchical
 * allreduce (with the call names), about a kilobyte per step.
 */
export function stepOptions(o: CollectiveOptions & { op?: ReduceOp; float?: 'float16' | 'bfloat16' }, d: Deadline, root = 0, output?: TypedArray, counts?: readonly number[]): StepOptions {
  return { tag: o.tag, signal: o.signal, timeoutMs: Math.max(1, d.remaining()), op: o.op, float: o.float, root, output, counts };
}

/**
 * A typed view of `count` elements over scratch bytes of `g` (like `like`). Registered memory
 * where the group lends it: every plan sends its scratch across hosts, and from 512 KiB the
 * fabric writes from registered memory in place instead of through a staging copy.
 */
export function scratchOf<T extends TypedArray>(g: Group, like: T, count: number): { view: T; area: Uint8Array } {
  const bytes = Math.max(1, count * like.BYTES_PER_ELEMENT);
  const area = g.acquireRegistered ? g.acquireRegistered(bytes) : g.acquire(bytes);
  const Ctor = like.constructor as new (b: ArrayBufferLike, o: number, n: number) => T;
  return { view: new Ctor(area.buffer, area.byteOffset, count), area };
}

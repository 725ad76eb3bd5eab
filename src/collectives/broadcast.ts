/** broadcast: the root's array reaches every rank, in place, down a binomial tree. */
import { bytesOf, checkArray, checkRoot, dtypeName, type TypedArray } from './checks.js';
import { beginCall, runAsync, runSync, type Algorithm, type CollectiveOptions, type CollectiveCall, type Group, refused } from './call.js';

export interface RootOptions extends CollectiveOptions {
  /** The rank that holds (or gets) the data (default 0). */
  root?: number;
}

/** Binomial tree over ranks relative to the root: log2(n) rounds. */
export function* binomialBroadcast(c: CollectiveCall, buf: Uint8Array, root: number): Algorithm {
  const n = c.size;
  const vr = (c.rank - root + n) % n;
  let mask = 1;
  while (mask < n) {
    if (vr & mask) {
      yield [c.recv((vr - mask + root) % n, buf)];
      break;
    }
    mask <<= 1;
  }
  mask >>= 1;
  const sends = [];
  for (; mask > 0; mask >>= 1) if (vr + mask < n) sends.push(c.send((vr + mask + root) % n, buf));
  if (sends.length) yield sends;
}

function plan(g: Group, data: TypedArray, options: RootOptions, where: string) {
  try {
    checkArray(where, 'data', data);
    const root = checkRoot(where, options.root, g.size);
    const c = beginCall(g, 'broadcast', options, dtypeName(where, data), undefined, root, data.byteLength);
    return { c, alg: binomialBroadcast(c, bytesOf(data), root) };
  } catch (err) {
    throw refused(g, err);
  }
}

/**
 * Copies the root's `data` into every rank's `data` (same length everywhere).
 *
 * @example
 * const weights = new Float32Array(1024);
 * if (ctx.rank === 0) weights.fill(0.5);
 * await broadcast(ctx, weights, { root: 0 });
 */
export async function broadcast<T extends TypedArray>(g: Group, data: T, options: RootOptions = {}): Promise<T> {
  const p = plan(g, data, options, `rank ${g.rank}: broadcast`);
  await runAsync(p.c, p.alg);
  return data;
}

export function broadcastSync<T extends TypedArray>(g: Group, data: T, options: RootOptions = {}): T {
  const p = plan(g, data, options, `rank ${g.rank}: broadcastSync`);
  runSync(p.c, p.alg);
  return data;
}


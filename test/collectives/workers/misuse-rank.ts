/**
 * A rank of the misuse matrix (test/collectives/misuse.test.ts), under `weft run -n 2`. For
 * every case: a fresh context, the case's calls (rank 0 is the odd one out where the ranks
 * disagree or misuse), the outcome as one JSON line, then a correct allreduce on another fresh
 * context. Args: [case names...] (default: all).
 */
import { init, WeftError, type ProcessGroup } from '../../../src/index.js';

type Case = (ctx: ProcessGroup, rank: number) => Promise<unknown>;

const f32 = (n: number, v: number) => new Float32Array(n).fill(v);

/** What each case does. A case returns normally only if no call failed. */
const CASES: Record<string, Case> = {
  // ---- the ranks disagree
  'allreduce op (small)': (c, r) => c.allreduce(f32(4, 1), { op: r === 0 ? 'max' : 'sum' }),
  'allreduce op (ring)': (c, r) => c.allreduce(f32(70_001, 1), { op: r === 0 ? 'max' : 'sum', algorithm: 'ring' }),
  'allreduce dtype': (c, r) => (r === 0 ? c.allreduce(new Int32Array(4)) : c.allreduce(new Float32Array(4))),
  'allreduce length (small)': (c, r) => c.allreduce(f32(r === 0 ? 5 : 4, 1)),
  'allreduce length (large)': (c, r) => c.allreduce(f32(r === 0 ? (1 << 20) + 1 : 1 << 20, 1)),
  'broadcast dtype': (c, r) => c.broadcast(r === 0 ? new Int32Array(8) : new Float32Array(8), { root: 0 }),
  'broadcast length': (c, r) => c.broadcast(f32(r === 0 ? 9 : 8, 1), { root: 0 }),
  // The root's message is already waiting when the receive is posted: the mismatch is found
  // at the post, and this rank's call must fail with it (it once waited for its timeout).
  'broadcast dtype, the message there first': async (c, r) => {
    if (r === 0) return void (await c.broadcast(new Int32Array(8), { root: 0 }));
    await new Promise((res) => setTimeout(res, 300));
    await c.broadcast(new Float32Array(8), { root: 0 });
  },
  // Every rank believes it is the root: nobody receives, so nobody can tell at once. The
  // next broadcast on the same tag must fail instead of handing over this call's bytes.
  'broadcast root, then the next broadcast': async (c, r) => {
    await c.broadcast(f32(8, r + 1), { root: r });
    const x = f32(8, r === 0 ? 7 : 0);
    await c.broadcast(x, { root: 0 });
    if (x[0] !== 7) throw new Error(`broadcast returned ${x[0]}, not the root's 7`);
  },
  'reduce root': (c, r) => c.reduce(f32(8, 1), { root: r }),
  'gather root': (c, r) => c.gather(f32(4, r), f32(8, 0), { root: r }),
  'scatter root': (c, r) => c.scatter(f32(8, r), f32(4, 0), { root: r }),
  'allgather length': (c, r) => c.allgather(f32(r === 0 ? 5 : 4, r), f32(r === 0 ? 10 : 8, 0)),
  'allgatherv counts': (c, r) => c.allgatherv(f32(r === 0 ? 3 : 4, r), f32(7, 0), r === 0 ? [3, 4] : [4, 3]),
  'reduce_scatter counts': (c, r) => c.reduceScatter(f32(8, 1), f32(r === 0 ? 3 : 4, 0), { counts: r === 0 ? [3, 5] : [4, 4] }),
  'alltoall length': (c, r) => c.alltoall(f32(r === 0 ? 6 : 4, r), f32(r === 0 ? 6 : 4, 0)),
  'alltoallv counts': (c, r) => c.alltoallv(f32(4, r), r === 0 ? [1, 3] : [2, 2], f32(4, 0), r === 0 ? [1, 3] : [2, 2]),
  'collective: allreduce vs broadcast': (c, r) => (r === 0 ? c.allreduce(f32(4, 1)) : c.broadcast(f32(4, 1), { root: 0 })),
  'collective: barrier vs allreduce': (c, r) => (r === 0 ? c.barrier() : c.allreduce(f32(4, 1))),
  'tag': (c, r) => c.allreduce(f32(4, 1), { tag: r === 0 ? 1 : 2 }),
  // ---- local misuse (rank 0, or every rank where the misuse needs it)
  'wrong type': (c, r) => c.allreduce((r === 0 ? [1, 2, 3, 4] : f32(4, 1)) as never),
  'overlapping output': (c, r) => {
    const buf = new Float32Array(12);
    return r === 0 ? c.allreduce(buf.subarray(0, 8), { output: buf.subarray(4, 12) }) : c.allreduce(buf.subarray(0, 8));
  },
  'aborted signal': (c, r) => c.allreduce(f32(4, 1), r === 0 ? { signal: AbortSignal.abort() } : {}),
  'concurrent same tag': (c) => Promise.all([c.allreduce(f32(300_000, 1), { tag: 5 }), c.allreduce(f32(300_000, 2), { tag: 5 })]),
  'bad root': (c, r) => c.broadcast(f32(4, 1), { root: r === 0 ? 2 : 0 }),
  'timeoutMs a string': (c, r) => c.allreduce(f32(4, 1), r === 0 ? { timeoutMs: '100' as never } : {}),
  'detached buffer': (c, r) => {
    const x = f32(4, 1);
    if (r === 0) structuredClone(x.buffer, { transfer: [x.buffer] });
    return c.allreduce(x);
  },
  'bitwise op on floats': (c, r) => c.allreduce(f32(4, 1), { op: r === 0 ? 'bxor' : 'sum' }),
  'blocking call while an async one runs': async (c) => {
    const p = c.allreduce(f32(4, 1));
    try {
      c.allreduceSync(f32(4, 1));
    } finally {
      await p.catch(() => {});
    }
  },
  // Point to point: each rank's own arguments (checked before anything is sent).
  'p2p: send to itself': (c, r) => c.send(f32(4, 1), r),
  'p2p: source out of range': (c) => c.recv(f32(4, 0), 2),
  'p2p: no source rank': (c) => c.recv(f32(4, 0), []),
  'p2p: tag past 2^32 - 1': (c, r) => c.send(f32(4, 1), 1 - r, { tag: 2 ** 32 }),
  'p2p: a string tag': (c, r) => c.recv(f32(4, 0), 1 - r, { tag: '5' as never }),
  'p2p: not a typed array': (c, r) => c.send([1, 2] as never, 1 - r),
  'after close': async (c) => {
    await c.close();
    await c.allreduce(f32(4, 1));
  },
};

const [, , ...names] = process.argv;
const rank = Number(process.env.WEFT_RANK);
const base = process.env.WEFT_PREFIX;
const list = names.length ? names : Object.keys(CASES);
for (let i = 0; i < list.length; i++) {
  const name = list[i];
  const ctx = await init({ prefix: `${base}-case${i}`, timeoutMs: 20_000 });
  // Every rank starts the case together, so "within the timeout" measures the case alone.
  await ctx.barrier({ timeoutMs: 20_000 });
  const t0 = performance.now();
  let outcome: { code: string; message: string } | { ok: true };
  try {
    await CASES[name](ctx, rank);
    outcome = { ok: true };
  } catch (err) {
    outcome = err instanceof WeftError ? { code: err.code, message: err.message } : { code: 'NOT_A_WEFTERROR', message: String((err as Error)?.stack ?? err) };
  }
  const ms = performance.now() - t0;
  // A rank whose call returned before another rank found the disagreement (a root that had
  // sent everything) learns of it at its next call: record what that call says.
  let next: { code: string; message: string } | undefined;
  if ('ok' in outcome && name !== 'after close') {
    try {
      await ctx.barrier({ timeoutMs: 3000 });
    } catch (err) {
      next = { code: (err as WeftError).code, message: (err as Error).message };
    }
  }
  await ctx.close({ timeoutMs: 3000 }).catch(() => {});
  // The next correct call, on a fresh context, is right.
  const fresh = await init({ prefix: `${base}-case${i}-after`, timeoutMs: 20_000 });
  const x = f32(1000, rank + 1);
  await fresh.allreduce(x);
  const fresh_ok = x.every((v) => v === 3);
  await fresh.close();
  console.log(`case ${JSON.stringify({ name, rank, ms: Math.round(ms), fresh: fresh_ok, next, ...outcome })}`);
}

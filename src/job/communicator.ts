/**
 * The collective and point-to-point calls, and subgroups, of any communicator: the job's
 * ProcessGroup and the Subgroups made from it (split, newGroup). One implementation, mixed
 * into both: a communicator is anything with a rank, a size, a transport (the job's, or a
 * subgroup's view of it) and scratch memory.
 */
import { WeftError } from '../errors.js';
import * as C from '../collectives/index.js';
import type { TypedArray } from '../collectives/checks.js';
import { GroupView, MAX_GROUP_ID } from '../transport/group-view.js';

/** Tag of the allgather inside split/newGroup (reserved, like close()'s barrier tag). */
const GROUP_TAG = 0xfffffffe;

/** What a communicator is made of. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type CommunicatorBase = new (...args: any[]) => C.Group;

/** Options of split and newGroup. */
export interface GroupOptions {
  /** Milliseconds the ranks may take to all make the call (default 30000). */
  timeoutMs?: number;
  signal?: AbortSignal;
}

/**
 * Adds every collective, point-to-point call and `split` / `newGroup` to a communicator class.
 */
export function withCollectives<B extends CommunicatorBase>(Base: B) {
  abstract class Communicator extends Base {
    /**
     * Splits this communicator as MPI_Comm_split does: every rank calls it; ranks that pass
     * the same `color` form a new communicator, ordered by `key` (ties by rank here). A rank
     * passing `undefined` joins none and gets undefined. The new one runs over the job's
     * existing connections (no new ones) and its traffic never meets this one's.
     *
     * @example
     * const host = await ctx.split(ctx.hosts.hostIndex[ctx.rank]);   // the ranks of my host
     * await host!.allreduce(x);
     */
    async split(color: number | undefined, key = 0, options: GroupOptions = {}): Promise<Subgroup | undefined> {
      const where = `rank ${this.rank}: split`;
      if (color !== undefined && (!Number.isInteger(color) || color < 0 || color > 0x7fffffff)) throw C.refused(this, new WeftError('EINVAL', `${where}: color must be an integer in [0, 2^31) or undefined, got ${color}`));
      if (!Number.isInteger(key) || key < -0x80000000 || key > 0x7fffffff) throw C.refused(this, new WeftError('EINVAL', `${where}: key must be a 32-bit integer, got ${key}`));
      const all = await oneAtATime(this, () => exchangeAndAgree(this, [color ?? -1, key, 0, 0], options));
      const id = all[2];
      if (color === undefined) return undefined;
      const members: number[] = [];
      for (let r = 0; r < this.size; r++) if (all[r * 4] === color) members.push(r);
      members.sort((a, b) => all[a * 4 + 1] - all[b * 4 + 1] || a - b);
      return subgroup(this, members, id);
    }

    /**
     * A communicator of `ranks` (of this one), as torch's new_group: every rank of this
     * communicator calls it with the same ranks; members get the new one (numbered in rank
     * order), the others undefined.
     *
     * @example
     * const evens = await ctx.newGroup([0, 2, 4, 6]);
     * if (evens) await evens.broadcast(x, { root: 0 });   // root 0 of the group: job rank 0
     */
    async newGroup(ranks: readonly number[], options: GroupOptions = {}): Promise<Subgroup | undefined> {
      const where = `rank ${this.rank}: newGroup`;
      const sorted = Array.isArray(ranks) ? [...ranks].sort((a, b) => a - b) : [];
      const bad = !Array.isArray(ranks) || ranks.length === 0 || sorted.some((r, i) => !Number.isInteger(r) || r < 0 || r >= this.size || (i > 0 && sorted[i - 1] === r));
      if (bad) throw C.refused(this, new WeftError('EINVAL', `${where}: ranks must be distinct ranks in [0, ${this.size}), at least one; got ${JSON.stringify(ranks)}`));
      let h = 0x811c9dc5;
      for (const r of sorted) h = Math.imul(h ^ r, 0x01000193);
      const all = await oneAtATime(this, () => exchangeAndAgree(this, [h | 0, sorted.length, 0, 0], options));
      for (let r = 0; r < this.size; r++) {
        if (all[r * 4] !== (h | 0) || all[r * 4 + 1] !== sorted.length) {
          throw C.refused(this, new WeftError('EINVAL', `${where}: rank ${r} passed other ranks than this rank's ${JSON.stringify(sorted)}: every rank must pass the same list`));
        }
      }
      return sorted.includes(this.rank) ? subgroup(this, sorted, all[2]) : undefined;
    }

    /**
     * Reduces `data` across every rank, in place (or into `options.output`): each element
     * becomes the `op` (default 'sum') of that element on all ranks. Resolves to the result.
     * Same length and dtype on every rank; `options.algorithm` picks one ('auto' by size).
     *
     * @example
     * const grad = new Float32Array(1 << 20).fill(ctx.rank);
     * await ctx.allreduce(grad);                       // grad[i] === 0 + 1 + ... + (size-1)
     * await ctx.allreduce(grad, { op: 'max' });
     */
    allreduce<T extends TypedArray>(data: T, options?: C.AllreduceOptions): Promise<T> {
      return C.allreduce(this, data, options);
    }
    /**
     * allreduce that blocks the thread until done (busy-polls; the lowest latency for small
     * arrays). Do not mix with a pending Promise call on the same tag.
     *
     * @example
     * const loss = Float64Array.of(localLoss);
     * ctx.allreduceSync(loss);                          // loss[0]: the sum over ranks
     */
    allreduceSync<T extends TypedArray>(data: T, options?: C.AllreduceOptions): T {
      return C.allreduceSync(this, data, options);
    }
    /**
     * Reduces `input` (size x output.length elements, or `options.counts`) across ranks; rank r
     * gets block r of the result in `output`.
     *
     * @example
     * const mine = new Float32Array(256);
     * await ctx.reduceScatter(new Float32Array(256 * ctx.size).fill(1), mine);   // mine[i] === size
     */
    reduceScatter<T extends TypedArray>(input: T, output: T, options?: C.ReduceScatterOptions): Promise<T> {
      return C.reduceScatter(this, input, output, options);
    }
    /**
     * The blocking form of reduceScatter.
     *
     * @example
     * ctx.reduceScatterSync(all, mine);
     */
    reduceScatterSync<T extends TypedArray>(input: T, output: T, options?: C.ReduceScatterOptions): T {
      return C.reduceScatterSync(this, input, output, options);
    }
    /**
     * Gathers every rank's `input` into `output` (size x input.length elements), in rank order,
     * on every rank.
     *
     * @example
     * const all = new Int32Array(ctx.size);
     * await ctx.allgather(Int32Array.of(ctx.rank), all);   // [0, 1, ..., size-1]
     */
    allgather<T extends TypedArray>(input: T, output: T, options?: C.CollectiveOptions): Promise<T> {
      return C.allgather(this, input, output, options);
    }
    /**
     * The blocking form of allgather.
     *
     * @example
     * ctx.allgatherSync(Int32Array.of(ctx.rank), all);
     */
    allgatherSync<T extends TypedArray>(input: T, output: T, options?: C.CollectiveOptions): T {
      return C.allgatherSync(this, input, output, options);
    }
    /**
     * allgather with per-rank element counts: rank r contributes `counts[r]` elements; `output`
     * holds their sum.
     *
     * @example
     * const counts = [...Array(ctx.size).keys()].map((r) => r + 1);
     * const out = new Float64Array(counts.reduce((a, b) => a + b, 0));
     * await ctx.allgatherv(new Float64Array(ctx.rank + 1).fill(ctx.rank), out, counts);
     */
    allgatherv<T extends TypedArray>(input: T, output: T, counts: readonly number[], options?: C.CollectiveOptions): Promise<T> {
      return C.allgatherv(this, input, output, counts, options);
    }
    /**
     * The blocking form of allgatherv.
     *
     * @example
     * ctx.allgathervSync(mine, out, counts);
     */
    allgathervSync<T extends TypedArray>(input: T, output: T, counts: readonly number[], options?: C.CollectiveOptions): T {
      return C.allgathervSync(this, input, output, counts, options);
    }
    /**
     * Copies the root's `data` into every rank's `data` (same length everywhere), in place.
     *
     * @example
     * const weights = new Float32Array(1024);
     * if (ctx.rank === 0) weights.fill(0.5);
     * await ctx.broadcast(weights, { root: 0 });
     */
    broadcast<T extends TypedArray>(data: T, options?: C.RootOptions): Promise<T> {
      return C.broadcast(this, data, options);
    }
    /**
     * The blocking form of broadcast.
     *
     * @example
     * ctx.broadcastSync(weights, { root: 0 });
     */
    broadcastSync<T extends TypedArray>(data: T, options?: C.RootOptions): T {
      return C.broadcastSync(this, data, options);
    }
    /**
     * Reduces `data` across ranks into the root's array (or `options.output` there); the other
     * ranks' arrays are inputs only.
     *
     * @example
     * const loss = Float64Array.of(localLoss);
     * await ctx.reduce(loss, { root: 0 });             // rank 0: the sum over ranks
     */
    reduce<T extends TypedArray>(data: T, options?: C.ReduceOptions): Promise<T> {
      return C.reduce(this, data, options);
    }
    /**
     * The blocking form of reduce.
     *
     * @example
     * ctx.reduceSync(loss, { root: 0, op: 'min' });
     */
    reduceSync<T extends TypedArray>(data: T, options?: C.ReduceOptions): T {
      return C.reduceSync(this, data, options);
    }
    /**
     * Collects every rank's `input` at the root, in rank order (`output`, size x input.length
     * elements, matters at the root only; pass undefined elsewhere). Resolves to it at the root.
     *
     * @example
     * const all = ctx.rank === 0 ? new Float64Array(ctx.size) : undefined;
     * await ctx.gather(Float64Array.of(score), all, { root: 0 });
     */
    gather<T extends TypedArray>(input: T, output: T | undefined, options?: C.RootOptions): Promise<T | undefined> {
      return C.gather(this, input, output, options);
    }
    /**
     * The blocking form of gather.
     *
     * @example
     * ctx.gatherSync(Float64Array.of(score), all, { root: 0 });
     */
    gatherSync<T extends TypedArray>(input: T, output: T | undefined, options?: C.RootOptions): T | undefined {
      return C.gatherSync(this, input, output, options);
    }
    /**
     * gather with per-rank element counts (rank r sends `counts[r]` elements).
     *
     * @example
     * const out = ctx.rank === 0 ? new Int32Array(total) : undefined;
     * await ctx.gatherv(mine, out, counts, { root: 0 });
     */
    gatherv<T extends TypedArray>(input: T, output: T | undefined, counts: readonly number[], options?: C.RootOptions): Promise<T | undefined> {
      return C.gatherv(this, input, output, counts, options);
    }
    /**
     * The blocking form of gatherv.
     *
     * @example
     * ctx.gathervSync(mine, out, counts, { root: 0 });
     */
    gathervSync<T extends TypedArray>(input: T, output: T | undefined, counts: readonly number[], options?: C.RootOptions): T | undefined {
      return C.gathervSync(this, input, output, counts, options);
    }
    /**
     * Splits the root's `input` (size x output.length elements; undefined elsewhere) in rank
     * order: rank r gets block r in `output`.
     *
     * @example
     * const mine = new Int32Array(4);
     * await ctx.scatter(ctx.rank === 0 ? Int32Array.from({ length: 4 * ctx.size }, (_, i) => i) : undefined, mine);
     */
    scatter<T extends TypedArray>(input: T | undefined, output: T, options?: C.RootOptions): Promise<T> {
      return C.scatter(this, input, output, options);
    }
    /**
     * The blocking form of scatter.
     *
     * @example
     * ctx.scatterSync(ctx.rank === 0 ? blocks : undefined, mine, { root: 0 });
     */
    scatterSync<T extends TypedArray>(input: T | undefined, output: T, options?: C.RootOptions): T {
      return C.scatterSync(this, input, output, options);
    }
    /**
     * Rank r's input block p (input.length / size elements) lands in rank p's output block r.
     *
     * @example
     * const out = new Int32Array(ctx.size);
     * await ctx.alltoall(Int32Array.from({ length: ctx.size }, (_, p) => ctx.rank * 100 + p), out);
     */
    alltoall<T extends TypedArray>(input: T, output: T, options?: C.CollectiveOptions): Promise<T> {
      return C.alltoall(this, input, output, options);
    }
    /**
     * The blocking form of alltoall.
     *
     * @example
     * ctx.alltoallSync(input, out);
     */
    alltoallSync<T extends TypedArray>(input: T, output: T, options?: C.CollectiveOptions): T {
      return C.alltoallSync(this, input, output, options);
    }
    /**
     * alltoall with counts: `sendCounts[p]` elements of `input` go to rank p, `recvCounts[p]`
     * come from it; blocks are contiguous, in rank order.
     *
     * @example
     * await ctx.alltoallv(input, [1, 2], out, [2, 1]);   // on 2 ranks
     */
    alltoallv<T extends TypedArray>(input: T, sendCounts: readonly number[], output: T, recvCounts: readonly number[], options?: C.CollectiveOptions): Promise<T> {
      return C.alltoallv(this, input, sendCounts, output, recvCounts, options);
    }
    /**
     * The blocking form of alltoallv.
     *
     * @example
     * ctx.alltoallvSync(input, sendCounts, out, recvCounts);
     */
    alltoallvSync<T extends TypedArray>(input: T, sendCounts: readonly number[], output: T, recvCounts: readonly number[], options?: C.CollectiveOptions): T {
      return C.alltoallvSync(this, input, sendCounts, output, recvCounts, options);
    }
    /**
     * Resolves once every rank has called it.
     *
     * @example
     * await ctx.barrier();                              // every rank got here
     */
    barrier(options?: C.CollectiveOptions): Promise<void> {
      return C.barrier(this, options);
    }
    /**
     * The blocking form of barrier.
     *
     * @example
     * ctx.barrierSync({ timeoutMs: 10_000 });
     */
    barrierSync(options?: C.CollectiveOptions): void {
      C.barrierSync(this, options);
    }
    /**
     * Sends `data` to rank `dst` (tag 0 unless `options.tag`); resolves when `data` may be
     * reused. Messages between two ranks on one tag arrive in the order they were sent.
     *
     * @example
     * if (ctx.rank === 0) await ctx.send(Float32Array.of(1, 2, 3), 1, { tag: 7 });
     */
    send(data: TypedArray, dst: number, options?: C.CollectiveOptions): Promise<void> {
      return C.send(this, data, dst, options);
    }
    /**
     * The blocking form of send.
     *
     * @example
     * ctx.sendSync(Float32Array.of(1, 2, 3), 1);
     */
    sendSync(data: TypedArray, dst: number, options?: C.CollectiveOptions): void {
      C.sendSync(this, data, dst, options);
    }
    /**
     * Receives into `data` from `src` (a rank, several ranks, or any rank when omitted);
     * resolves to the rank it came from. The message may be shorter than `data`.
     *
     * @example
     * const buf = new Float32Array(3);
     * const from = await ctx.recv(buf, 0, { tag: 7 });
     */
    recv(data: TypedArray, src?: number | readonly number[], options?: C.CollectiveOptions): Promise<number> {
      return C.recv(this, data, src, options);
    }
    /**
     * The blocking form of recv; returns the source rank.
     *
     * @example
     * const from = ctx.recvSync(buf);                  // from any rank
     */
    recvSync(data: TypedArray, src?: number | readonly number[], options?: C.CollectiveOptions): number {
      return C.recvSync(this, data, src, options);
    }
    /**
     * Starts a send and returns its Request; `data` must not change until it completes.
     *
     * @example
     * const req = ctx.isend(Float32Array.of(1, 2, 3), 1, { tag: 5 });
     * await req.wait();
     */
    isend(data: TypedArray, dst: number, options?: C.CollectiveOptions): C.Request {
      return C.isend(this, data, dst, options);
    }
    /**
     * Starts a receive and returns its Request: `wait()` resolves to the source rank, then
     * `byteLength` says how long the message was.
     *
     * @example
     * const req = ctx.irecv(new Float32Array(3));
     * const from = await req.wait();
     */
    irecv(data: TypedArray, src?: number | readonly number[], options?: C.CollectiveOptions): C.Request {
      return C.irecv(this, data, src, options);
    }
  }
  return Communicator;
}

/** Every rank's four words (an allgather on the reserved tag). */
async function exchange(comm: C.Group, words: number[], options: GroupOptions): Promise<Int32Array> {
  const out = new Int32Array(4 * comm.size);
  await C.allgather(comm, Int32Array.from(words), out, { tag: GROUP_TAG, timeoutMs: options.timeoutMs ?? 30_000, signal: options.signal });
  return out;
}

/**
 * Every rank's words, with word 2 of this rank's proposal for the new group's id; on return
 * all[2] holds the agreed id (the largest proposal), which every rank has moved past.
 */
async function exchangeAndAgree(comm: C.Group, words: number[], options: GroupOptions): Promise<Int32Array> {
  const device = comm.transport.device;
  words[2] = device.proposeGroupId();
  const all = await exchange(comm, words, options);
  let id = 0;
  for (let r = 0; r < comm.size; r++) id = Math.max(id, all[r * 4 + 2]);
  device.adoptGroupId(id);
  all[2] = id;
  return all;
}

/**
 * Group creations of one process run one after another. Two running at once on communicators
 * that share a rank could both propose, and agree on, the same id (neither has moved past it
 * yet), and their traffic would then share slots. In sequence, a creation's proposals come
 * after every earlier one's agreement. As with MPI, ranks that share two communicators must
 * create groups from them in the same order.
 */
function oneAtATime<T>(comm: C.Group, create: () => Promise<T>): Promise<T> {
  const device = comm.transport.device;
  const run = device.groupCreation.then(create, create);
  device.groupCreation = run.catch(() => undefined);
  return run;
}

function subgroup(comm: C.Group, members: number[], id: number): Subgroup {
  // Ids from MAX_GROUP_ID - 2 up belong to the hierarchy of a job that spans hosts (job/hierarchy.ts).
  if (id >= MAX_GROUP_ID - 2) throw new WeftError('EINVAL', `rank ${comm.rank}: more than ${MAX_GROUP_ID - 3} subgroups made in one job`);
  const worldMembers = members.map((r) => comm.transport.worldRank(r));
  return new Subgroup(comm, new GroupView(comm.transport.device, worldMembers, id), members.indexOf(comm.rank));
}

/** What a Subgroup is built on: its parent (for scratch memory) and its view of the transport. */
class SubgroupBase implements C.Group {
  readonly size: number;
  constructor(
    /** The communicator this one was made from. */
    readonly parent: C.Group,
    readonly transport: GroupView,
    /** This rank's number in the subgroup. */
    readonly rank: number,
    /** What the group is, in messages. */
    private readonly kind = 'a subgroup',
  ) {
    this.size = transport.members.length;
  }
  /** "rank 5 (rank 1 of 2 in a subgroup)": messages name job ranks elsewhere. */
  get label(): string {
    return `rank ${this.worldRank(this.rank)} (rank ${this.rank} of ${this.size} in ${this.kind})`;
  }
  /** The job ranks of the members, in subgroup order. */
  get ranks(): readonly number[] {
    return this.transport.members;
  }
  /** The job rank of member `r`. */
  worldRank(r: number): number {
    return this.transport.worldRank(r);
  }
  acquire(bytes: number): Uint8Array {
    return this.parent.acquire(bytes);
  }
  release(area: Uint8Array): void {
    this.parent.release(area);
  }
}

/**
 * A communicator over some of the job's ranks (from `split` or `newGroup`): every collective
 * and point-to-point call, with ranks numbered inside the group, over the job's connections.
 * A failure in it aborts the whole job, as any failed collective does.
 */
export class Subgroup extends withCollectives(SubgroupBase) {}

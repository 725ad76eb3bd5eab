/**
 * The ProcessGroup users get from init() (Gloo's Context, torch's ProcessGroup): a connected
 * rank (rendezvous, NIC, transport) with the collectives and point-to-point calls as
 * methods, and copyrpc on the same device (`rpc()`). Each collective has a Promise form and a
 * `...Sync` form that busy-polls the calling thread (lowest latency; it blocks the event loop).
 */
import { joinJob, type InitOptions } from './bootstrap.js';
import { JobMember } from './member.js';
import * as C from '../collectives/index.js';
import { RpcEngine, type RpcEngineOptions } from '../rpc/engine.js';
import type { WaitOptions } from '../util/deadline.js';
import type { TypedArray } from '../collectives/checks.js';
import type { TypedArrayConstructor } from '../transport/shared-arrays.js';

/** Tag of the barrier inside close(): out of the way of user tags (they may use the whole range, rarely this one). */
const CLOSE_TAG = 0xffffffff;

export class ProcessGroup extends JobMember implements C.Group {
  private rpcEngine: RpcEngine | undefined;

  /**
   * Leaves the job. Collective: waits (at most `timeoutMs`, default 5 s) in a barrier for the
   * other ranks to close too, so the last messages this rank sent are delivered before its
   * rings and QPs go away (on ofi a send is complete once staged, not once received). A rank
   * that never closes only delays this; a dead one is skipped.
   */
  private closing = false;
  override async close(options: WaitOptions = {}): Promise<void> {
    if (this.closing) return super.close(options);
    this.closing = true;
    if (!this.transport.failure && !this.transport.closed && this.size > 1) {
      await C.barrier(this, { tag: CLOSE_TAG, timeoutMs: options.timeoutMs ?? 5000, signal: options.signal }).catch(() => {});
    }
    await super.close(options);
  }

  /**
   * A zeroed typed array in memory registered with this rank's device. Collectives over such
   * arrays can skip the staging rings: on shm, peers on this host read them in place (a large
   * allreduce then moves each byte once). Pass them like any other array; they live until
   * close(). Arrays in the JS heap keep working everywhere, through the rings.
   *
   * @example
   * const grad = ctx.alloc(Float32Array, 1 << 24);   // 64 MiB
   * grad.fill(ctx.rank);
   * await ctx.allreduce(grad);                        // read in place by the other ranks
   */
  alloc<T extends TypedArray>(ctor: TypedArrayConstructor<T>, length: number): T {
    return this.transport.shared.alloc(ctor, length);
  }

  /**
   * copyrpc on this rank's device (created on first call; the same engine every time): its
   * completions share the CQ with the collectives', and it can register `alloc` arrays for
   * one-sided access. Connect endpoints toward the other ranks with `connectRpcMesh`
   * (through this group's store) or exchange `localInfo()` yourself. Options apply on the
   * first call only.
   *
   * @example
   * import { connectRpcMesh } from 'weft/rpc';
   * const rpc = ctx.rpc();
   * const eps = await connectRpcMesh(ctx.store, rpc, ctx.rank, ctx.size);
   * if (ctx.rank === 0) console.log(await eps[1]!.request(new Uint8Array([1, 2, 3])));
   * else rpc.serve((payload) => payload);                  // echo
   */
  rpc<U = unknown>(options?: RpcEngineOptions): RpcEngine<U> {
    this.rpcEngine ??= new RpcEngine(this.router, options);
    return this.rpcEngine as RpcEngine<U>;
  }

  protected override closeUsers(): void {
    this.rpcEngine?.close();
  }

  /** @see allreduce in collectives/allreduce.ts */
  allreduce<T extends TypedArray>(data: T, options?: C.AllreduceOptions): Promise<T> {
    return C.allreduce(this, data, options);
  }
  allreduceSync<T extends TypedArray>(data: T, options?: C.AllreduceOptions): T {
    return C.allreduceSync(this, data, options);
  }
  reduceScatter<T extends TypedArray>(input: T, output: T, options?: C.ReduceScatterOptions): Promise<T> {
    return C.reduceScatter(this, input, output, options);
  }
  reduceScatterSync<T extends TypedArray>(input: T, output: T, options?: C.ReduceScatterOptions): T {
    return C.reduceScatterSync(this, input, output, options);
  }
  allgather<T extends TypedArray>(input: T, output: T, options?: C.CollectiveOptions): Promise<T> {
    return C.allgather(this, input, output, options);
  }
  allgatherSync<T extends TypedArray>(input: T, output: T, options?: C.CollectiveOptions): T {
    return C.allgatherSync(this, input, output, options);
  }
  allgatherv<T extends TypedArray>(input: T, output: T, counts: readonly number[], options?: C.CollectiveOptions): Promise<T> {
    return C.allgatherv(this, input, output, counts, options);
  }
  allgathervSync<T extends TypedArray>(input: T, output: T, counts: readonly number[], options?: C.CollectiveOptions): T {
    return C.allgathervSync(this, input, output, counts, options);
  }
  broadcast<T extends TypedArray>(data: T, options?: C.RootOptions): Promise<T> {
    return C.broadcast(this, data, options);
  }
  broadcastSync<T extends TypedArray>(data: T, options?: C.RootOptions): T {
    return C.broadcastSync(this, data, options);
  }
  reduce<T extends TypedArray>(data: T, options?: C.ReduceOptions): Promise<T> {
    return C.reduce(this, data, options);
  }
  reduceSync<T extends TypedArray>(data: T, options?: C.ReduceOptions): T {
    return C.reduceSync(this, data, options);
  }
  gather<T extends TypedArray>(input: T, output: T | undefined, options?: C.RootOptions): Promise<T | undefined> {
    return C.gather(this, input, output, options);
  }
  gatherSync<T extends TypedArray>(input: T, output: T | undefined, options?: C.RootOptions): T | undefined {
    return C.gatherSync(this, input, output, options);
  }
  gatherv<T extends TypedArray>(input: T, output: T | undefined, counts: readonly number[], options?: C.RootOptions): Promise<T | undefined> {
    return C.gatherv(this, input, output, counts, options);
  }
  gathervSync<T extends TypedArray>(input: T, output: T | undefined, counts: readonly number[], options?: C.RootOptions): T | undefined {
    return C.gathervSync(this, input, output, counts, options);
  }
  scatter<T extends TypedArray>(input: T | undefined, output: T, options?: C.RootOptions): Promise<T> {
    return C.scatter(this, input, output, options);
  }
  scatterSync<T extends TypedArray>(input: T | undefined, output: T, options?: C.RootOptions): T {
    return C.scatterSync(this, input, output, options);
  }
  alltoall<T extends TypedArray>(input: T, output: T, options?: C.CollectiveOptions): Promise<T> {
    return C.alltoall(this, input, output, options);
  }
  alltoallSync<T extends TypedArray>(input: T, output: T, options?: C.CollectiveOptions): T {
    return C.alltoallSync(this, input, output, options);
  }
  alltoallv<T extends TypedArray>(input: T, sendCounts: readonly number[], output: T, recvCounts: readonly number[], options?: C.CollectiveOptions): Promise<T> {
    return C.alltoallv(this, input, sendCounts, output, recvCounts, options);
  }
  alltoallvSync<T extends TypedArray>(input: T, sendCounts: readonly number[], output: T, recvCounts: readonly number[], options?: C.CollectiveOptions): T {
    return C.alltoallvSync(this, input, sendCounts, output, recvCounts, options);
  }
  barrier(options?: C.CollectiveOptions): Promise<void> {
    return C.barrier(this, options);
  }
  barrierSync(options?: C.CollectiveOptions): void {
    C.barrierSync(this, options);
  }
  send(data: TypedArray, dst: number, options?: C.CollectiveOptions): Promise<void> {
    return C.send(this, data, dst, options);
  }
  sendSync(data: TypedArray, dst: number, options?: C.CollectiveOptions): void {
    C.sendSync(this, data, dst, options);
  }
  /** Receives from `src` (a rank, ranks, or any when omitted); resolves to the source rank. */
  recv(data: TypedArray, src?: number | readonly number[], options?: C.CollectiveOptions): Promise<number> {
    return C.recv(this, data, src, options);
  }
  recvSync(data: TypedArray, src?: number | readonly number[], options?: C.CollectiveOptions): number {
    return C.recvSync(this, data, src, options);
  }
  isend(data: TypedArray, dst: number, options?: C.CollectiveOptions): C.Request {
    return C.isend(this, data, dst, options);
  }
  irecv(data: TypedArray, src?: number | readonly number[], options?: C.CollectiveOptions): C.Request {
    return C.irecv(this, data, src, options);
  }
}

/**
 * Joins the job: rank, size and store from options or the environment (`weft run`, torchrun,
 * mpirun), then a full mesh of connections.
 *
 * @example
 * import { init } from 'weft';
 * const ctx = await init();                       // under `weft run -n 4 app.js`
 * const x = new Float32Array(1024).fill(ctx.rank);
 * await ctx.allreduce(x);                          // x[i] === 0 + 1 + 2 + 3
 * await ctx.close();
 */
export function init(options: InitOptions = {}): Promise<ProcessGroup> {
  return joinJob((parts) => new ProcessGroup(parts), options);
}

export type { InitOptions };

/**
 * The ProcessGroup users get from init() (Gloo's Context, torch's ProcessGroup): a connected
 * rank (rendezvous, NIC, transport) with the collectives and point-to-point calls as
 * methods, and copyrpc on the same device (`rpc()`). Each collective has a Promise form and a
 * `...Sync` form that busy-polls the calling thread (lowest latency; it blocks the event loop).
 */
import { WeftError } from '../errors.js';
import { joinJob, type InitOptions } from './bootstrap.js';
import { JobMember, type JobParts } from './member.js';
import { hierarchyOf } from './hierarchy.js';
import { closeFence } from './close-fence.js';
import { checkArray, checkRoot } from '../collectives/checks.js';
import { withCollectives } from './communicator.js';
import * as C from '../collectives/index.js';
import { RpcEngine, type RpcEngineOptions } from '../rpc/engine.js';
import { TransferEngine, type TransferEngineOptions } from '../transfer/engine.js';
import type { WaitOptions } from '../util/deadline.js';
import type { TypedArray } from '../collectives/checks.js';
import type { TypedArrayConstructor } from '../transport/shared-arrays.js';

/** Tag of the barrier inside close(): out of the way of user tags (they may use the whole range, rarely this one). */
const CLOSE_TAG = 0xffffffff;

export class ProcessGroup extends withCollectives(JobMember) {
  private rpcEngine: RpcEngine | undefined;
  private transferEngine: Promise<TransferEngine> | undefined;
  /** The engine once open (closeUsers closes it without waiting). */
  private openedEngine: TransferEngine | undefined;
  /**
   * A job that spans hosts: the subgroups its hierarchical collectives run on (this rank's
   * host, the hosts' leaders, the ranks with this local rank on every host). Undefined on
   * one host.
   */
  readonly hierarchy: C.Hierarchy | undefined;

  constructor(parts: JobParts) {
    super(parts);
    this.hierarchy = parts.hosts.spansHosts ? hierarchyOf(this, parts.hosts) : undefined;
  }

  /**
   * Reduces `data` across all ranks, in place (or into `options.output`); resolves to the
   * result. On a job that spans hosts it runs inside each host first, then across hosts
   * (`algorithm: 'hierarchical'`, the default there).
   *
   * @example
   * const grad = new Float32Array(1 << 20).fill(ctx.rank);
   * await ctx.allreduce(grad);                 // grad[i] === 0 + 1 + ... + (size-1)
   */
  override allreduce<T extends TypedArray>(data: T, options: C.AllreduceOptions = {}): Promise<T> {
    const h = this.hierarchyFor(options, options.algorithm === undefined || options.algorithm === 'auto' || options.algorithm === 'hierarchical');
    if (!h) return super.allreduce(data, options);
    C.checkAllreduce(this, data, options, `rank ${this.rank}: allreduce`);
    return C.hierarchicalAllreduce(this, h, data, options);
  }
  override allreduceSync<T extends TypedArray>(data: T, options: C.AllreduceOptions = {}): T {
    const h = this.hierarchyFor(options, options.algorithm === undefined || options.algorithm === 'auto' || options.algorithm === 'hierarchical');
    if (!h) return super.allreduceSync(data, options);
    C.checkAllreduce(this, data, options, `rank ${this.rank}: allreduceSync`);
    return C.hierarchicalAllreduceSync(this, h, data, options);
  }
  override broadcast<T extends TypedArray>(data: T, options: C.RootOptions = {}): Promise<T> {
    const h = this.hierarchyFor(options, true);
    if (!h) return super.broadcast(data, options);
    return C.hierarchicalBroadcast(this, h, data, this.checkedRoot(options, 'broadcast', data), options);
  }
  override broadcastSync<T extends TypedArray>(data: T, options: C.RootOptions = {}): T {
    const h = this.hierarchyFor(options, true);
    if (!h) return super.broadcastSync(data, options);
    return C.hierarchicalBroadcastSync(this, h, data, this.checkedRoot(options, 'broadcastSync', data), options);
  }
  override allgather<T extends TypedArray>(input: T, output: T, options: C.CollectiveOptions = {}): Promise<T> {
    const h = this.hierarchyFor(options, this.hierarchy?.contiguous === true);
    if (!h) return super.allgather(input, output, options);
    return C.hierarchicalAllgather(this, h, input, output, options);
  }
  override allgatherSync<T extends TypedArray>(input: T, output: T, options: C.CollectiveOptions = {}): T {
    const h = this.hierarchyFor(options, this.hierarchy?.contiguous === true);
    if (!h) return super.allgatherSync(input, output, options);
    return C.hierarchicalAllgatherSync(this, h, input, output, options);
  }
  override reduceScatter<T extends TypedArray>(input: T, output: T, options: C.ReduceScatterOptions = {}): Promise<T> {
    const h = this.hierarchyFor(options, this.hierarchy?.contiguous === true && options.counts === undefined);
    if (!h) return super.reduceScatter(input, output, options);
    return C.hierarchicalReduceScatter(this, h, input, output, options);
  }
  override reduceScatterSync<T extends TypedArray>(input: T, output: T, options: C.ReduceScatterOptions = {}): T {
    const h = this.hierarchyFor(options, this.hierarchy?.contiguous === true && options.counts === undefined);
    if (!h) return super.reduceScatterSync(input, output, options);
    return C.hierarchicalReduceScatterSync(this, h, input, output, options);
  }
  override barrier(options: C.CollectiveOptions = {}): Promise<void> {
    const h = this.hierarchyFor(options, true);
    return h ? C.hierarchicalBarrier(this, h, options) : super.barrier(options);
  }
  override barrierSync(options: C.CollectiveOptions = {}): void {
    const h = this.hierarchyFor(options, true);
    if (h) C.hierarchicalBarrierSync(this, h, options);
    else super.barrierSync(options);
  }

  /** The hierarchy when this call should use it: the job spans hosts, the call allows it. */
  private hierarchyFor(options: C.CollectiveOptions, applicable: boolean): C.Hierarchy | undefined {
    return this.hierarchy && applicable && options.hierarchical !== false ? this.hierarchy : undefined;
  }

  private checkedRoot(options: C.RootOptions, what: string, data: TypedArray): number {
    try {
      checkArray(`rank ${this.rank}: ${what}`, 'data', data);
      return checkRoot(`rank ${this.rank}: ${what}`, options.root, this.size);
    } catch (err) {
      throw C.refused(this, err);
    }
  }

  /**
   * Leaves the job. Collective: waits (at most `timeoutMs`, default 5 s) for the other ranks to
   * close too, so the last messages this rank sent are delivered before its rings and QPs go
   * away. On one host over shared memory that is a barrier; when ranks talk over the fabric,
   * a fence through the store (close-fence.ts: on ofi a send is complete once staged, and a
   * barrier's own last message could be lost with the device). A rank that never closes only
   * delays this; a dead one is skipped.
   */
  private closing = false;
  override async close(options: WaitOptions = {}): Promise<void> {
    if (this.closing) return super.close(options);
    this.closing = true;
    if (!this.transport.failure && !this.transport.closed && this.size > 1) {
      const wait = { timeoutMs: options.timeoutMs ?? 5000, signal: options.signal };
      if (this.transport.board) await C.barrier(this, { tag: CLOSE_TAG, ...wait }).catch(() => {});
      else await closeFence(this, wait).catch(() => {});
    }
    // After the barrier or fence: no peer still moves data to or from this rank's segment. An engine
    // still opening is not waited for (it closes itself when it opens, see transfer()).
    await this.openedEngine?.close();
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
   * import { connectRpcMesh } from 'weftjs/rpc';
   * const rpc = ctx.rpc();
   * const eps = await connectRpcMesh(ctx.store, rpc, ctx.rank, ctx.size);
   * if (ctx.rank === 0) console.log(await eps[1]!.request(new Uint8Array([1, 2, 3])));
   * else rpc.serve((payload) => payload);                  // echo
   */
  rpc<U = unknown>(options?: RpcEngineOptions): RpcEngine<U> {
    this.rpcEngine ??= new RpcEngine(this.router, options);
    return this.rpcEngine as RpcEngine<U>;
  }

  /**
   * The transfer engine on this rank's device (weftjs/transfer, docs/transfer.md): opened on
   * the first call, which is collective (every rank calls it), and the same engine on later
   * calls until it is closed. Options apply on the opening call only. `close()` closes it.
   *
   * @example
   * const engine = await ctx.transfer();
   * const buf = ctx.alloc(Uint8Array, 1 << 20);
   * await engine.registerLocalMemory(buf);
   */
  transfer(options?: TransferEngineOptions): Promise<TransferEngine> {
    const opening = this.transferEngine;
    if (opening) {
      return opening.then((e) => {
        if (!e.closed) return e;
        if (this.transferEngine === opening) this.transferEngine = undefined;
        return this.transfer(options);
      });
    }
    const next = TransferEngine.open(this, options).then(async (e) => {
      // Opened while the context closed: it must not outlive the device.
      if (this.closing) {
        await e.close();
        throw new WeftError('ECLOSED', `rank ${this.rank}: transfer(): the context was closed while the engine opened`);
      }
      this.openedEngine = e;
      return e;
    });
    this.transferEngine = next;
    next.catch(() => {
      if (this.transferEngine === next) this.transferEngine = undefined;
    });
    return next;
  }

  protected override closeUsers(): void {
    this.rpcEngine?.close();
    this.openedEngine?.closeNow();
  }
}

/**
 * Joins the job: rank, size and store from options or the environment (`weft run`, torchrun,
 * mpirun), then a full mesh of connections.
 *
 * @example
 * import { init } from 'weftjs';
 * const ctx = await init();                       // under `weft run -n 4 app.js`
 * const x = new Float32Array(1024).fill(ctx.rank);
 * await ctx.allreduce(x);                          // x[i] === 0 + 1 + 2 + 3
 * await ctx.close();
 */
export function init(options: InitOptions = {}): Promise<ProcessGroup> {
  return joinJob((parts) => new ProcessGroup(parts), options);
}

export type { InitOptions };

/**
 * The copyrpc engine: the endpoints of one process on its NIC device, ONE completion queue
 * for all of them (the device's, shared with the transport and the transfer engine through
 * the completion router), the endpoint registry (an array indexed by QP number: O(1), no
 * hashing), the shared receive credits, the queue of received requests, and poll().
 *
 * poll(), in the notes' order:
 *  1. poll the CQ (the router hands our QPs' completions to this engine's inbox, in arrival
 *     order) and decode each RECV_WRITE_IMM on its endpoint; responses go to `onResponse` at
 *     once, requests to recv();
 *  2. (send completions are in the same CQ: READ results update the consumer position, raw
 *     one-sided operations count down `rawPending`, errors fail their endpoint);
 *  3. repost receive credits below 2/3;
 *  4. flush every endpoint with work: one WRITE_IMM per batch, plus consumer READs.
 *
 * Receive credits (the SRQ): our NIC has per-QP credits, not a shared receive queue, so the
 * context emulates the SRQ's accounting. `srqSize` bounds the credits posted over all
 * endpoints; each endpoint takes its share at creation; posted credits are counted
 * context-wide and every consumed one is remembered per endpoint. When the context's posted
 * count falls below 2/3 of what was posted, every endpoint is topped up in one sweep, as the
 * notes repost the SRQ. Because a per-QP credit cannot move to another QP, an endpoint
 * whose own share falls below 2/3 is also topped up, so an idle endpoint's credits never
 * starve a busy one. The engine's QPs have no autoRepost: the NIC reposts nothing by itself
 * for them (the transport's QPs on the same device keep theirs).
 */
import { WeftError } from '../errors.js';
import { createDevice, CompletionBatch, CompletionRouter, Opcode, Status, type CompletionSink, type Device, type DeviceOptions, type MemoryRegion } from '../nic/index.js';
import type { ShmDeviceOptions } from '../nic/shm/device.js';
import { Deadline, type WaitOptions } from '../util/deadline.js';
import { DEFAULT_SRQ_SIZE } from './constants.js';
import { Endpoint, WR_RAW, WR_READ, type EndpointOptions, type RpcHost } from './endpoint.js';
import { RecvHandle } from './recv-handle.js';
import { Driver, type RequestOptions, type ServeHandler, type ServeOptions, type Server } from './driver.js';

/** Called for each response: the payload is `buffer[offset, offset + length)`, valid during the call only. */
export type ResponseHandler<U> = (userData: U, buffer: Uint8Array, offset: number, length: number, endpoint: Endpoint<U>) => void;
/** Called once per pending call of an endpoint that failed (peer dead, malformed batch, ...). */
export type CallFailedHandler<U> = (userData: U, error: WeftError, endpoint: Endpoint<U>) => void;

/** Options of an RpcEngine. */
export interface RpcEngineOptions {
  /** Receive credits over all endpoints (the SRQ size, default 1024). */
  srqSize?: number;
  /** Check the credit invariant on every batch, call and reply (also WEFT_RPC_DEBUG=1). */
  debug?: boolean;
  /**
   * Milliseconds a peer on another host may leave the fabric's liveness probe unanswered
   * before its endpoint fails with EPEERDEAD and its pending calls reach `onCallFailed`
   * (default: the device's `opTimeoutMs` given to createRpcEngine, else 30000). A peer polls
   * to answer, as it polls to serve calls: raise this for peers that stop polling for long.
   */
  peerTimeoutMs?: number;
}

/** Options of `createRpcEngine`: the device's, plus the engine's own. */
export interface CreateRpcEngineOptions extends DeviceOptions, ShmDeviceOptions, RpcEngineOptions {}

const MAX_QPN = 1024;
/** RpcEngineOptions.peerTimeoutMs by default (the NIC's opTimeoutMs default). */
const DEFAULT_PEER_TIMEOUT_MS = 30_000;
/** Polls between looks at the clock for silent peers, and the least time between looks. */
const SILENCE_CHECK_POLLS = 256;
const SILENCE_CHECK_MS = 200;
/** The response handler of a poll without one (also marks "inside poll"). */
const IGNORE = (): void => {};

/**
 * Creates an engine on a device of its own (provider as in createDevice: 'shm', 'ofi', ...),
 * for programs that use copyrpc without a job. In a job, `ctx.rpc()` gives the engine on the
 * job's device instead (one device per process).
 *
 * @example
 * const rpc = await createRpcEngine({ provider: 'shm', label: 'rank 0' });
 * const ep = rpc.createEndpoint({ sendRingSize: 1 << 16, recvRingSize: 1 << 16, peerLabel: 'rank 1' });
 */
export async function createRpcEngine<U = unknown>(options: CreateRpcEngineOptions = {}): Promise<RpcEngine<U>> {
  const device = await createDevice(options);
  let engine: RpcEngine<U>;
  try {
    engine = new RpcEngine<U>(new CompletionRouter(device), { ...options, peerTimeoutMs: options.peerTimeoutMs ?? (options.opTimeoutMs !== undefined && options.opTimeoutMs > 0 ? options.opTimeoutMs : undefined) });
  } catch (err) {
    device.close(); // refused options (srqSize, peerTimeoutMs): the device is nobody's
    throw err;
  }
  engine.ownsDevice = true;
  return engine;
}

export class RpcEngine<U = unknown> implements RpcHost<U>, CompletionSink {
  readonly router: CompletionRouter;
  readonly device: Device;
  readonly label: string;
  readonly debug: boolean;
  readonly srqSize: number;
  /** See RpcEngineOptions.peerTimeoutMs. */
  readonly peerTimeoutMs: number;
  /** Endpoints in creation order (index = endpoint id). */
  readonly endpoints: Endpoint<U>[] = [];
  private readonly byQpn: (Endpoint<U> | undefined)[] = new Array(MAX_QPN).fill(undefined);
  /** Completions the router handed us and poll() has not processed yet. */
  private inbox = new CompletionBatch(256);
  /** Where poll() reads the CQ when the engine is alone on its device (see pollAlone). */
  private readonly batch = new CompletionBatch(256);
  private dirtyList: Endpoint<U>[] = [];
  private nDirty = 0;
  /** Endpoints whose requests recv() handed out since the last poll. */
  private takenList: Endpoint<U>[] = [];
  private nTaken = 0;
  // Received requests, FIFO, and the pool of handles.
  private queue: (RecvHandle<U> | undefined)[] = new Array(64).fill(undefined);
  private qHead = 0;
  private qTail = 0;
  private readonly pool: RecvHandle<U>[] = [];
  // SRQ accounting.
  private srqMax = 0;
  private srqPosted = 0;
  private readonly consumed: Endpoint<U>[] = [];
  private nConsumed = 0;
  // Poll state.
  private onResponse: ResponseHandler<U> | undefined;
  private callbackError: unknown = undefined;
  private readonly failed: Endpoint<U>[] = [];
  private rawPostedCount = 0;
  private rawDoneCount = 0;
  /** Raw one-sided operations that completed with an error, and the last such error. */
  rawFailed = 0;
  rawError: WeftError | undefined;
  /** Set by createRpcEngine: close() closes the device too. */
  ownsDevice = false;
  private closed = false;
  private driverOf: Driver<U> | undefined;
  /** Inside poll(), routing: completions of our QPs are decoded as they come (see take). */
  private direct = false;
  /** Completions decoded by the current poll(). */
  private handled = 0;
  /** Polls since the last look at silent peers, and when that look was (checkSilentPeers). */
  private pollsSinceSilenceCheck = 0;
  private lastSilenceCheck = 0;

  /** An engine on `router`'s device, which it shares with the router's other owners. */
  constructor(router: CompletionRouter, options: RpcEngineOptions = {}) {
    this.router = router;
    this.device = router.device;
    this.label = router.device.label;
    this.debug = options.debug ?? process.env.WEFT_RPC_DEBUG === '1';
    this.srqSize = options.srqSize ?? DEFAULT_SRQ_SIZE;
    if (!Number.isInteger(this.srqSize) || this.srqSize < 4) throw new WeftError('EINVAL', `${this.label}: srqSize must be an integer >= 4, got ${this.srqSize}`);
    this.peerTimeoutMs = options.peerTimeoutMs ?? DEFAULT_PEER_TIMEOUT_MS;
    if (!(this.peerTimeoutMs > 0)) throw new WeftError('EINVAL', `${this.label}: peerTimeoutMs must be a positive number of milliseconds, got ${options.peerTimeoutMs}`);
  }

  /**
   * Creates an endpoint (its rings, memory registrations and QP). Exchange `ep.localInfo()`
   * with the peer and call `ep.connect(peerInfo)`.
   *
   * @example
   * const ep = rpc.createEndpoint({ sendRingSize: 1 << 20, recvRingSize: 1 << 20, peerLabel: 'rank 1' });
   */
  createEndpoint(options: EndpointOptions = {}): Endpoint<U> {
    if (this.closed) throw new WeftError('ECLOSED', `${this.label}: createEndpoint on a closed context`);
    const share = options.recvCredits ?? 64;
    if (this.srqMax + share > this.srqSize) {
      throw new WeftError('EINVAL', `${this.label}: createEndpoint: ${this.endpoints.length} endpoints already hold ${this.srqMax} of the ${this.srqSize} shared receive credits; create the context with a larger srqSize or give endpoints fewer recvCredits`);
    }
    const ep = new Endpoint<U>(this, this.endpoints.length, options);
    if (ep.qp.qpn >= MAX_QPN) throw new WeftError('EINVAL', `${this.label}: QP number ${ep.qp.qpn} beyond the registry`);
    this.endpoints.push(ep);
    this.byQpn[ep.qp.qpn] = ep;
    this.router.attach(ep.qp.qpn, this);
    this.srqMax += share;
    this.srqPosted += share;
    return ep;
  }

  /** Allocates registered memory for rdmaRead/rdmaWrite (send its descriptor() to the peer). */
  allocate(byteLength: number): MemoryRegion {
    return this.device.allocate(byteLength);
  }

  /**
   * Registers existing memory for rdmaRead/rdmaWrite: any view on ofi; on shm, memory of
   * this device (`allocate`, or a job's `ctx.alloc` arrays, which live on the same device).
   *
   * @example
   * const grad = ctx.alloc(Float32Array, 1024);
   * const mr = ctx.rpc().register(grad);        // peers may now rdmaRead it
   */
  register(view: ArrayBufferView): MemoryRegion {
    return this.device.register(view);
  }

  /** Completions handed to this engine and not processed by poll() yet. */
  get inboxSize(): number {
    return this.inbox.count;
  }

  /**
   * CompletionSink: the router hands us a completion of one of our QPs. During our own poll
   * it is decoded at once; otherwise (another layer polled) it waits in the inbox, and so do
   * all later ones until the inbox is drained, so batches are always decoded in order.
   */
  take(b: CompletionBatch, i: number): void {
    if (this.direct && this.inbox.count === 0) {
      this.handled++;
      if (b.opcode[i] === Opcode.RECV_WRITE_IMM) this.ingestFrom(b, i);
      else this.handle(b, i);
      return;
    }
    let box = this.inbox;
    if (box.count === box.capacity) box = this.growInbox();
    box.copyEntry(box.count++, b, i);
  }

  private growInbox(): CompletionBatch {
    const old = this.inbox;
    const box = new CompletionBatch(old.capacity * 2);
    for (let i = 0; i < old.count; i++) box.copyEntry(i, old, i);
    box.count = old.count;
    this.inbox = box;
    return box;
  }

  /**
   * Raw one-sided operations posted and not completed yet. Those of an endpoint that closes
   * or fails count as completed then, in `rawFailed` (their bytes may or may not have moved).
   */
  get rawPending(): number {
    return this.rawPostedCount - this.rawDoneCount;
  }

  /** Received requests not yet taken by recv(). */
  get queuedRequests(): number {
    return this.qTail - this.qHead;
  }

  /**
   * Processes completions, delivers responses to `onResponse`, queues requests for recv(),
   * reposts receive credits and flushes every endpoint with pending batches. Returns the
   * number of completions handled. Exceptions thrown by the callbacks are rethrown after the
   * poll has finished its work (the protocol state stays consistent).
   *
   * @example
   * const n = rpc.poll((token, buf, off, len) => done(token, buf.subarray(off, off + len)));
   */
  poll(onResponse?: ResponseHandler<U>, onCallFailed?: CallFailedHandler<U>): number {
    if (this.onResponse !== undefined) throw new WeftError('EINVAL', `${this.label}: poll() called from a poll callback; return from the callback and poll again`);
    if (this.nTaken > 0) this.refreshReleases();
    // No try/finally here: it costs this loop a tenth of its speed. Callback exceptions are
    // caught in deliverResponse; anything else is a bug that leaves the engine unusable anyway.
    this.onResponse = onResponse ?? IGNORE;
    // Completions other layers' polls routed here arrived first: decode them first.
    let k = this.inbox.count > 0 ? this.drainInbox() : 0;
    if (this.router.soleOwner === this) {
      // Alone on the device (copyrpc without a job): read the CQ straight into our batch,
      // without routing (a fifth of a call's CPU on shm).
      const b = this.batch;
      const n = this.router.pollAlone(b);
      const byQpn = this.byQpn;
      for (let i = 0; i < n; i++) {
        if (b.opcode[i] !== Opcode.RECV_WRITE_IMM) {
          this.handle(b, i);
          continue;
        }
        // ingestFrom, spelled out: this is the loop every response and request goes through.
        const ep = byQpn[b.qpn[i]];
        if (ep === undefined) continue;
        this.srqPosted--;
        if (ep.consumedCredits++ === 0) this.consumed[this.nConsumed++] = ep;
        ep.ingest(b.imm[i]);
      }
      k += n;
    } else {
      this.direct = true;
      this.handled = 0;
      this.router.poll();
      this.direct = false;
      k += this.handled;
    }
    // Completions a callback's own poll routed here meanwhile.
    if (this.inbox.count > 0) k += this.drainInbox();
    this.onResponse = undefined;
    this.repost();
    this.flush();
    // Idle polls look at the clock each time (they have nothing better to do); busy ones every
    // SILENCE_CHECK_POLLS polls.
    if (k === 0 || ++this.pollsSinceSilenceCheck >= SILENCE_CHECK_POLLS) this.checkSilentPeers();
    if (this.failed.length > 0 && onCallFailed) this.reportFailures(onCallFailed);
    if (this.callbackError !== undefined) {
      const err = this.callbackError;
      this.callbackError = undefined;
      throw err;
    }
    return k;
  }

  /** A batch arrived on one of our endpoints. */
  private ingestFrom(b: CompletionBatch, i: number): void {
    const ep = this.byQpn[b.qpn[i]];
    if (ep === undefined) return;
    this.srqPosted--;
    if (ep.consumedCredits++ === 0) this.consumed[this.nConsumed++] = ep;
    ep.ingest(b.imm[i]);
  }

  /** Decodes the inbox in arrival order (entries added meanwhile included); returns how many. */
  private drainInbox(): number {
    // this.inbox, not a local: a callback's poll may grow (replace) it meanwhile.
    let i = 0;
    for (; i < this.inbox.count; i++) this.handle(this.inbox, i);
    this.inbox.count = 0;
    return i;
  }

  /** Decodes one completion of one of our QPs. */
  private handle(b: CompletionBatch, i: number): void {
    const op = b.opcode[i];
    if (op === Opcode.RECV_WRITE_IMM) return this.ingestFrom(b, i);
    const wr = b.wrId[i];
    const err = b.errors[i];
    b.errors[i] = undefined;
    // A completion of an endpoint closed or failed since: its raw operations were counted
    // done (failed) when it went (endpointClosed).
    const ep = this.byQpn[b.qpn[i]];
    if (ep === undefined) return;
    if (wr === WR_RAW && op !== Opcode.QP_EVENT) {
      ep.rawInFlight--;
      this.rawDoneCount++;
      if (b.status[i] !== Status.SUCCESS) {
        this.rawFailed++;
        this.rawError = err;
      }
      return;
    }
    if (op === Opcode.READ && wr === WR_READ) ep.onReadDone(b.status[i] === Status.SUCCESS);
    if (b.status[i] !== Status.SUCCESS) ep.fail(this.nicError(ep, err, b.status[i]));
  }

  /**
   * The next received request, or undefined. Requests come out in arrival order; reply to
   * them in any order.
   *
   * @example
   * for (let h = rpc.recv(); h; h = rpc.recv()) h.reply(h.payload);
   */
  recv(): RecvHandle<U> | undefined {
    while (this.qHead !== this.qTail) {
      const h = this.queue[this.qHead] as RecvHandle<U>;
      this.queue[this.qHead++] = undefined;
      if (this.qHead === this.qTail) this.qHead = this.qTail = 0;
      const ep = h.endpoint;
      if (ep.state !== 'ready') {
        this.releaseHandle(h);
        continue;
      }
      ep.taken(h.holdSeq);
      if (!ep.tookSincePoll) {
        ep.tookSincePoll = true;
        this.takenList[this.nTaken++] = ep;
      }
      return h;
    }
    return undefined;
  }

  /**
   * Answers every request on every endpoint with `handler` (the convenience layer; the
   * context's driver polls until the server is closed). Replies may come in any order.
   *
   * @example
   * const server = rpc.serve(async (payload) => payload); // echo
   * // ... later
   * server.close();
   */
  serve(handler: ServeHandler, options?: ServeOptions): Server {
    return this.driver().serve(handler, options);
  }

  /** Endpoint.request: through this engine's driver. */
  request(ep: Endpoint<U>, bytes: Uint8Array, options?: RequestOptions): Promise<Uint8Array> {
    return this.driver().request(ep, bytes, options);
  }

  private driver(): Driver<U> {
    return (this.driverOf ??= new Driver<U>(this));
  }

  /** Sends every open batch now (poll does this too). */
  flush(): void {
    const list = this.dirtyList;
    // From the end, the count kept exact at every step: an endpoint whose flush throws (a
    // debug-mode invariant failure) leaves the rest listed for the next flush.
    while (this.nDirty > 0) {
      const ep = list[--this.nDirty];
      list[this.nDirty] = undefined as unknown as Endpoint<U>;
      ep.flushWork();
    }
  }

  /**
   * Waits until a completion is available (spins, then yields, then sleeps), after sending
   * what is pending. Throws ETIMEDOUT / EABORTED.
   *
   * @example
   * while (!done) if (rpc.poll(onResponse) === 0) await rpc.wait({ timeoutMs: 1000 });
   */
  wait(options: WaitOptions = {}): Promise<void> {
    this.flush();
    return this.router.waitAsync(this.hasInbox, { deadline: new Deadline(options.timeoutMs, options.signal), what: `${this.label}: rpc wait` });
  }

  /** Blocking variant of wait. */
  waitSync(options: WaitOptions = {}): void {
    this.flush();
    this.router.waitSync(this.hasInbox, { deadline: new Deadline(options.timeoutMs, options.signal), what: `${this.label}: rpc waitSync` });
  }

  /** What wait() waits for: completions routed here, or an endpoint failed for a silent peer (poll() reports it). */
  private readonly hasInbox = (): boolean => this.inbox.count > 0 || this.checkSilentPeers();

  /** Closes every endpoint, and the device when the engine created it. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    // Requests still waiting for an answer fail now rather than at their timeouts.
    this.driverOf?.close(new WeftError('ECLOSED', `${this.label}: the rpc engine was closed with the request outstanding`));
    for (const ep of this.endpoints) ep.close();
    if (this.ownsDevice) {
      this.router.close(new WeftError('ECLOSED', `${this.label}: the rpc engine was closed while this wait was pending`));
      this.device.close();
    }
  }

  // ---- RpcHost --------------------------------------------------------------------------

  markDirty(ep: Endpoint<U>): void {
    if (ep.dirty) return;
    ep.dirty = true;
    this.dirtyList[this.nDirty++] = ep;
    if (this.onDirtyWhileIdle !== undefined) this.onDirtyWhileIdle();
  }

  /**
   * @internal Set by the driver while it waits for work: an endpoint made dirty meanwhile (a
   * serve handler replying through its handle after an await) must wake it to be flushed.
   */
  onDirtyWhileIdle: (() => void) | undefined = undefined;

  /** @internal Endpoints with something to send at the next flush. */
  get pendingFlush(): boolean {
    return this.nDirty > 0;
  }

  deliverResponse(userData: U, buffer: Uint8Array, offset: number, length: number, ep: Endpoint<U>): void {
    const cb = this.onResponse;
    if (cb === undefined) return;
    // A callback may poll the device itself (a blocking collective): what that poll routes
    // here waits in the inbox, behind the batch being decoded now.
    const direct = this.direct;
    this.direct = false;
    try {
      cb(userData, buffer, offset, length, ep);
    } catch (err) {
      if (this.callbackError === undefined) this.callbackError = err;
    } finally {
      this.direct = direct;
    }
  }

  pushRequest(ep: Endpoint<U>, callId: number, offset: number, length: number, internalAllowance: number, holdSeq: number): void {
    const h = this.pool.pop() ?? new RecvHandle<U>();
    h.endpoint = ep;
    h.callId = callId;
    h.offset = offset;
    h.length = length;
    h.internalAllowance = internalAllowance;
    h.holdSeq = holdSeq;
    h.live = true;
    h.generation++;
    if (this.qTail === this.queue.length) this.growQueue();
    this.queue[this.qTail++] = h;
  }

  releaseHandle(h: RecvHandle<U>): void {
    h.live = false;
    this.pool.push(h);
  }

  endpointFailed(ep: Endpoint<U>): void {
    this.endpointClosed(ep);
    this.failed.push(ep);
  }

  /** Unregisters `ep` and gives its share of the receive credits back (failed or closed). */
  endpointClosed(ep: Endpoint<U>): void {
    if (this.byQpn[ep.qp.qpn] === ep) {
      this.byQpn[ep.qp.qpn] = undefined;
      this.router.detach(ep.qp.qpn, this);
    }
    this.srqMax -= ep.recvCredits;
    this.srqPosted -= ep.recvCredits - ep.consumedCredits;
    ep.consumedCredits = 0;
    // Its rdmaRead / rdmaWrite still in flight will never be reported (the QP is detached
    // from the router before it closes): they count as failed now, so rawPending drains.
    if (ep.rawInFlight > 0) {
      this.rawDoneCount += ep.rawInFlight;
      this.rawFailed += ep.rawInFlight;
      this.rawError = new WeftError(ep.error?.code ?? 'ECLOSED', `${ep.name}: ${ep.rawInFlight} rdmaRead/rdmaWrite in flight when the endpoint ${ep.state === 'failed' ? 'failed' : 'closed'}; their bytes may or may not have moved`, { cause: ep.error });
      ep.rawInFlight = 0;
    }
  }

  rawPosted(): void {
    this.rawPostedCount++;
  }

  // ---- internals ------------------------------------------------------------------------

  private refreshReleases(): void {
    const list = this.takenList;
    for (let i = 0; i < this.nTaken; i++) {
      const ep = list[i];
      list[i] = undefined as unknown as Endpoint<U>;
      ep.tookSincePoll = false;
      if (ep.state === 'ready') ep.refreshRelease();
    }
    this.nTaken = 0;
  }

  private repost(): void {
    const n0 = this.nConsumed;
    if (n0 === 0) return;
    const list = this.consumed;
    const all = this.srqPosted * 3 < this.srqMax * 2;
    // A counter, not list.length: assigning an array's length is a runtime call per poll.
    let keep = 0;
    for (let i = 0; i < n0; i++) {
      const ep = list[i];
      const n = ep.consumedCredits;
      // An endpoint not connected yet that has received batches (kept for connect()) gets
      // its credits back too: its QP takes receives before connect, and its peer may be
      // waiting for them.
      if ((ep.state !== 'ready' && ep.state !== 'init') || n === 0) continue;
      if (all || n * 3 >= ep.recvCredits) {
        ep.consumedCredits = 0;
        this.srqPosted += n;
        ep.qp.postRecv(n);
      } else {
        list[keep++] = ep;
      }
    }
    for (let i = keep; i < n0; i++) list[i] = undefined as unknown as Endpoint<U>;
    this.nConsumed = keep;
  }

  /**
   * Peers on another host cannot be looked up: their QPs probe them through the fabric, and
   * libfabric's rxm neither completes nor fails a probe (or a call) toward a process that
   * died. An endpoint whose peer has left its probe unanswered for peerTimeoutMs fails with
   * EPEERDEAD, so its pending calls reach onCallFailed instead of waiting forever. Runs from
   * poll() and from every wait of the engine and its request driver (their `ready`), at most
   * every SILENCE_CHECK_MS; true when it failed an endpoint.
   * @internal
   */
  checkSilentPeers(): boolean {
    this.pollsSinceSilenceCheck = 0;
    const now = performance.now();
    const since = now - this.lastSilenceCheck;
    if (since < SILENCE_CHECK_MS) return false;
    this.lastSilenceCheck = now;
    // Nobody looked for a long while (this thread was busy elsewhere, stopped, or in a long
    // garbage collection): the fabric has not been progressed either, and answers may wait in
    // it. Judge at the next look, after the polls in between.
    if (since > Math.max(2 * SILENCE_CHECK_MS, this.peerTimeoutMs / 4)) return false;
    let failed = false;
    for (const ep of this.endpoints) {
      if (ep.state !== 'ready') continue;
      const ms = ep.qp.unansweredMs ?? 0;
      if (ms <= this.peerTimeoutMs) continue;
      const at = ep.qp.peerAddress ? ` at ${ep.qp.peerAddress}` : '';
      ep.fail(new WeftError('EPEERDEAD', `${this.label}: ${ep.peerLabel}${at} has not answered the fabric for ${Math.round(ms)} ms (peerTimeoutMs ${this.peerTimeoutMs}): its process or its host is gone, or it stopped polling; the endpoint's pending calls fail; reconnect when the peer is back`));
      failed = true;
    }
    return failed;
  }

  private reportFailures(cb: CallFailedHandler<U>): void {
    const eps = this.failed.splice(0);
    for (const ep of eps) {
      const err = ep.error as WeftError;
      ep.drainPending((ud) => {
        try {
          cb(ud, err, ep);
        } catch (e) {
          if (this.callbackError === undefined) this.callbackError = e;
        }
      });
    }
  }

  private nicError(ep: Endpoint<U>, err: WeftError | undefined, status: number): WeftError {
    const code = status === Status.PEER_DEAD ? 'EPEERDEAD' : status === Status.TIMEOUT ? 'ETIMEDOUT' : status === Status.REMOTE_ACCESS ? 'EREMOTEACCESS' : err?.code ?? 'ETRANSPORT';
    const hint = status === Status.PEER_DEAD ? 'the peer process died; its pending calls fail, reconnect when it is back' : 'pending calls on this endpoint fail; reconnect with a new endpoint';
    return new WeftError(code, `${ep.name} failed: ${err?.message ?? `status ${status}`}; ${hint}`, { cause: err });
  }

  private growQueue(): void {
    const live = this.qTail - this.qHead;
    if (this.qHead > 0 && live < this.queue.length / 2) {
      this.queue.copyWithin(0, this.qHead, this.qTail);
      this.queue.fill(undefined, live);
    } else {
      const q = new Array<RecvHandle<U> | undefined>(this.queue.length * 2).fill(undefined);
      for (let i = 0; i < live; i++) q[i] = this.queue[this.qHead + i];
      this.queue = q;
    }
    this.qHead = 0;
    this.qTail = live;
  }
}

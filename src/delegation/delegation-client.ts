/**
 * The client side of delegationrpc: any thread of any process on the host writes requests
 * straight into a server's shared ring (fetch_add on head, write, commit: section 2.2 of the
 * design notes) and reads the answers from its own response slots.
 *
 * @example
 * ```ts
 * import { DelegationClient } from 'weftjs/delegation';
 * const client = DelegationClient.connect(serverName);
 * const req = new Uint8Array(32);
 * client.call(req, 'my token');
 * while (client.poll((token, response) => console.log(token, response)) === 0) client.waitSync({ timeoutMs: 1000 });
 * client.close();
 * ```
 */
import { availableParallelism } from 'node:os';
import { WeftError } from '../errors.js';
import { loadAcquire, PLAIN_LOAD_ACQUIRES } from '../host/acquire.js';
import { ShortCopier } from '../host/copy.js';
import { FutexBell, ringBell } from '../host/futex-bell.js';
import { plainPublishAllowed } from '../host/remote-fence.js';
import { waitSync, type WaitPlan } from '../host/wait.js';
import { Deadline, type WaitOptions } from '../util/deadline.js';
import {
  attachedClients, clearClientRecord, CLIENT, CLIENT_ATTACHED, CLIENT_CLOSING, CLIENT_RELEASED, clientWord, H, PHASE_ABANDONED, PHASE_IDLE, PHASE_RESERVED,
  PHASE_RESERVING, readHeader, RESP, SERVER, SLOT, type DelegationLayout,
} from './delegation-layout.js';
import { claimId } from './claim.js';
import { ServerDisconnected } from './errors.js';
import { ownerAlive, writeOwner } from './owner.js';
import { openLayerSegment } from './segment.js';
import { ServerWatch } from './server-watch.js';
import { Waiter } from './waiter.js';

/** Options of DelegationClient.connect. */
export interface DelegationClientOptions {
  /** Expected request size: a mismatch with the ring's is refused at connect. */
  requestBytes?: number;
  /** Expected response size: a mismatch with the ring's is refused at connect. */
  responseBytes?: number;
  /** Timeout of a call that waits for ring space (default WEFT_TIMEOUT_MS or 30 s). */
  timeoutMs?: number;
}

/** Called by poll() for each response: the call's user data and the response bytes (a view, valid during the call). */
export type ResponseHandler<U> = (userData: U, response: Uint8Array, respSlot: number) => void;

const HEAD_W = H.HEAD >> 2;
const TAIL_W = H.TAIL >> 2;

/** One client of a delegationrpc ring. Not shared between threads: each thread connects its own. */
export class DelegationClient<U = unknown> extends Waiter {
  /** This client's id in the ring (its response slots). */
  readonly clientId: number;
  readonly layout: DelegationLayout;
  private readonly name: string;
  private readonly u8: Uint8Array;
  private readonly i32: Int32Array;
  private readonly base: number;
  private readonly srv: number;
  private readonly ringMask: number;
  private readonly respMask: number;
  private readonly respBase: number;
  private readonly payloads: Uint8Array[] = [];
  private readonly responses: Uint8Array[] = [];
  private readonly users: (U | undefined)[];
  private readonly busy: Uint8Array;
  protected readonly bell: FutexBell;
  private readonly watch: ServerWatch;
  private readonly tailBell: FutexBell;
  private readonly timeoutMs?: number;
  private nextResp = 0;
  private oldest = 0;
  private inflight = 0;
  private openOffset = -1;
  private openSlot = 0;
  private pendingPos = 0;
  private tailSeen = 0;
  private epochSeen = -1;
  private readonly epochWord: number;
  /** Commit with a plain store: x86, this process registered for remote fences, and a server whose sleeps fence. */
  private readonly plainCommit: boolean;
  private readonly copier = new ShortCopier();
  private closed = false;

  private constructor(name: string, sab: SharedArrayBuffer, layout: DelegationLayout, clientId: number, o: DelegationClientOptions) {
    super();
    this.name = name;
    this.layout = layout;
    this.clientId = clientId;
    this.u8 = new Uint8Array(sab);
    this.i32 = new Int32Array(sab);
    this.base = clientWord(layout, clientId);
    this.srv = layout.ext >> 2;
    this.epochWord = this.srv + SERVER.TAIL_EPOCH;
    this.ringMask = layout.ringDepth - 1;
    this.respMask = layout.respDepth - 1;
    this.respBase = layout.respArea + clientId * layout.respDepth * layout.respSlot;
    for (let i = 0; i < layout.ringDepth; i++) this.payloads.push(new Uint8Array(sab, H.RING + i * layout.reqSlot + SLOT.PAYLOAD, layout.requestBytes));
    for (let s = 0; s < layout.respDepth; s++) this.responses.push(new Uint8Array(sab, this.respBase + s * layout.respSlot + RESP.PAYLOAD, layout.responseBytes));
    this.users = new Array<U | undefined>(layout.respDepth).fill(undefined);
    this.busy = new Uint8Array(layout.respDepth);
    // A server that publishes SERVER.FENCES may mark responses valid with plain stores: this
    // client's sleeps must then fence (host/remote-fence.ts).
    const fences = Atomics.load(this.i32, this.srv + SERVER.FENCES) === 1;
    this.bell = new FutexBell(this.i32, this.base + CLIENT.SLEEPING, this.base + CLIENT.BELL, fences);
    // Before ATTACHED (connect stores it with Atomics): the server answers plainly only then.
    this.i32[this.base + CLIENT.FENCES] = fences ? 1 : 0;
    this.tailBell = new FutexBell(this.i32, this.srv + SERVER.TAIL_SLEEPING, this.srv + SERVER.TAIL_BELL);
    this.timeoutMs = o.timeoutMs;
    this.plainCommit = fences && plainPublishAllowed();
    this.watch = new ServerWatch(this.u8, H.SERVER_ALIVE, this.i32, this.srv + SERVER.STATE, `DelegationClient ${clientId}`, name, () => `${this.inflight} call(s) in flight are lost`);
  }

  /**
   * Maps the server's segment, checks its header (EPROTO when it is not a DLGRPCV1 ring of
   * this version) and claims a client id (EINVAL when max_clients are already attached).
   */
  static connect<U = unknown>(name: string, options: DelegationClientOptions = {}): DelegationClient<U> {
    const sab = openLayerSegment(name, 'DelegationClient.connect');
    const layout = readHeader(sab, name);
    for (const k of ['requestBytes', 'responseBytes'] as const) {
      if (options[k] !== undefined && options[k] !== layout[k]) throw new WeftError('EINVAL', `DelegationClient.connect: ${k} ${options[k]}, but the ring at ${name} was made with ${layout[k]}`);
    }
    const u8 = new Uint8Array(sab);
    const i32 = new Int32Array(sab);
    if (Atomics.load(u8, H.SERVER_ALIVE) !== 1 || !ownerAlive(i32, layout.ext >> 2)) throw new ServerDisconnected(`DelegationClient.connect: the server of ${name} is gone (closed or dead); start it again and connect to the name it reports`);
    const id = claimId(i32, H.NEXT_CLIENT_ID >> 2, layout.maxClients, (c) => clientWord(layout, c) + CLIENT.STATE);
    if (id < 0) throw new WeftError('EINVAL', `DelegationClient.connect: ${name} already has max_clients = ${layout.maxClients} clients attached (a closed client's id is freed once the server has answered all its calls); close one, or create the server with a larger maxClients`);
    // The owner right after the claim, as in ipc: the server reaps a CLAIMING id whose owner is
    // written and dead, so a thread killed while it builds its views does not leak the id.
    const base = clientWord(layout, id);
    writeOwner(i32, base);
    let client: DelegationClient<U>;
    try {
      client = new DelegationClient<U>(name, sab, layout, id, options);
    } catch (err) {
      clearClientRecord(i32, base);
      Atomics.store(i32, base + CLIENT.STATE, CLIENT_RELEASED);
      throw err;
    }
    Atomics.store(i32, base + CLIENT.PHASE, PHASE_IDLE);
    for (let s = 0; s < layout.respDepth; s++) Atomics.store(u8, client.respBase + s * layout.respSlot + RESP.VALID, 0);
    Atomics.store(i32, base + CLIENT.STATE, CLIENT_ATTACHED);
    return client;
  }

  /** Calls issued whose responses poll() has not yet delivered. */
  get inFlight(): number {
    return this.inflight;
  }

  /**
   * Sends `payload` (at most requestBytes; the rest of the slot is left as is) with
   * `userData` for poll() to hand back. False when every response slot is taken: poll and
   * call again. Waits (spin, yield, sleep) while the ring is full, at most timeoutMs.
   */
  call(payload: Uint8Array, userData?: U): boolean {
    if (payload.length > this.layout.requestBytes) throw new WeftError('EINVAL', `DelegationClient ${this.clientId}: request of ${payload.length} bytes, the ring at ${this.name} takes ${this.layout.requestBytes}`);
    if (this.begin(userData) === null) return false;
    this.copier.copy(this.u8, this.i32, this.openOffset + SLOT.PAYLOAD, payload, payload.length);
    this.commit();
    return true;
  }

  /**
   * The first phase of a call: reserves a response slot and a ring slot (fetch_add on head,
   * then waits for space) and returns the slot's request bytes to fill in place; commit()
   * publishes them. Null when every response slot is taken.
   */
  begin(userData?: U): Uint8Array | null {
    if (this.closed) throw new WeftError('ECLOSED', `DelegationClient ${this.clientId} of ${this.name} is closed`);
    if (this.openOffset >= 0) throw new WeftError('EINVAL', `DelegationClient ${this.clientId}: begin() twice without commit()`);
    if (this.inflight === this.layout.respDepth) {
      this.watch.onIdle('call');
      return null;
    }
    let s = this.nextResp;
    while (this.busy[s] !== 0) s = (s + 1) & this.respMask;
    this.watch.onCall();
    const i32 = this.i32;
    const base = this.base;
    // The phase words let the server tell whose hole it is if this thread dies in between.
    i32[base + CLIENT.PHASE] = PHASE_RESERVING;
    const pos = Atomics.add(i32, HEAD_W, 1);
    if (pos === -1) Atomics.add(i32, HEAD_W + 1, 1); // carry into head's high word
    i32[base + CLIENT.RESERVED_POS] = pos;
    // The server must never read RESERVED beside an older position (it would skip a live
    // client's hole): x86 keeps these stores in order; elsewhere the phase is a release store.
    if (PLAIN_LOAD_ACQUIRES) i32[base + CLIENT.PHASE] = PHASE_RESERVED;
    else Atomics.store(i32, base + CLIENT.PHASE, PHASE_RESERVED);
    // Flow control against the tail read last time, a lower bound of the server's: the shared
    // tail is a cache line the server writes on every batch, read again only when the bound
    // says full. The server's epoch count (a word it writes once per 2^30 positions) tells
    // that the cached tail is still less than 2^30 behind, so the 32-bit difference is exact.
    const epoch = loadAcquire(i32, this.epochWord);
    if (epoch !== this.epochSeen || (pos - this.tailSeen) >>> 0 >= this.layout.ringDepth) {
      this.epochSeen = epoch;
      if ((pos - (this.tailSeen = Atomics.load(i32, TAIL_W))) >>> 0 >= this.layout.ringDepth) this.waitForSpace(pos);
    }
    const off = H.RING + (pos & this.ringMask) * this.layout.reqSlot;
    i32[(off + SLOT.CLIENT_ID) >> 2] = this.clientId;
    i32[(off + SLOT.RESP_SLOT) >> 2] = s;
    this.users[s] = userData;
    this.openOffset = off;
    this.openSlot = s;
    return this.payloads[pos & this.ringMask];
  }

  /**
   * The second phase: publishes the request begun by begin(). ECLOSED after close(): the
   * position was given up (the server skips it) and the id may have a new owner.
   */
  commit(): void {
    if (this.closed) throw new WeftError('ECLOSED', `DelegationClient ${this.clientId} of ${this.name}: commit() after close(): the request begun was abandoned; connect again to send it`);
    const off = this.openOffset;
    if (off < 0) throw new WeftError('EINVAL', `DelegationClient ${this.clientId}: commit() without begin()`);
    // A plain store where the server's sleeps fence (host/remote-fence.ts): Atomics.store's full
    // fence made this thread wait for the slot's cache line to come back from the server, a
    // sixth of a call. x86 keeps it after the payload's stores: it is a release store there.
    if (this.plainCommit) this.u8[off + SLOT.COMMITTED] = 1;
    else Atomics.store(this.u8, off + SLOT.COMMITTED, 1);
    // The server's hole check relies on this order: a phase it reads as idle means the commit
    // is visible. x86 keeps stores in order; elsewhere a later plain store may pass the commit.
    if (PLAIN_LOAD_ACQUIRES) this.i32[this.base + CLIENT.PHASE] = PHASE_IDLE;
    else Atomics.store(this.i32, this.base + CLIENT.PHASE, PHASE_IDLE);
    this.openOffset = -1;
    const s = this.openSlot;
    this.busy[s] = 1;
    this.inflight++;
    this.nextResp = (s + 1) & this.respMask;
    ringBell(this.i32, this.srv + SERVER.SLEEPING, this.srv + SERVER.BELL);
  }

  /**
   * Delivers the responses that have arrived (each to `onResponse` with its call's user
   * data) and frees their slots; returns how many.
   */
  poll(onResponse?: ResponseHandler<U>): number {
    if (this.closed) throw this.closedError('poll');
    if (this.inflight === 0) return 0;
    // Answers mostly come in call order: deliver the run of answered slots from the oldest
    // call, and look further (every busy slot) only when that run is empty. Reading slots the
    // server has not written yet would pull their cache lines away from it.
    const n = this.deliver(onResponse, true);
    if (n > 0) return n;
    const m = this.deliver(onResponse, false);
    if (m === 0) this.watch.onIdle('poll');
    return m;
  }

  private deliver(onResponse: ResponseHandler<U> | undefined, prefixOnly: boolean): number {
    let left = this.inflight;
    const u8 = this.u8;
    const slot = this.layout.respSlot;
    const mask = this.respMask;
    const busy = this.busy;
    let n = 0;
    let s = this.oldest;
    let oldest = -1;
    // The first slot looked at is read with Atomics (a loop of polls always has a real
    // synchronizing load); the later ones need acquire order only (host/acquire.ts).
    let first = true;
    for (let k = 0; k <= mask && left > 0; k++, s = (s + 1) & mask) {
      if (busy[s] === 0) continue;
      left--;
      const off = this.respBase + s * slot;
      const valid = first ? Atomics.load(u8, off) : loadAcquire(u8, off);
      first = false;
      if (valid !== 1) {
        if (oldest < 0) oldest = s;
        if (prefixOnly) break;
        continue;
      }
      const user = this.users[s] as U;
      this.users[s] = undefined;
      // Taken before the handler runs: a handler that throws, or polls again, must not get
      // this response a second time. A plain store is enough: the server writes this slot
      // again only for a call that names it, whose commit comes after this store (an
      // Atomics.store, or on x86 a plain store, which x86 keeps after this one).
      u8[off] = 0;
      n++;
      try {
        // The slot stays busy during the handler, so a call made from it cannot take it (the
        // response view stays intact).
        onResponse?.(user, this.responses[s], s);
      } finally {
        busy[s] = 0;
        this.inflight--;
      }
    }
    if (oldest >= 0) this.oldest = oldest;
    else if (left === 0) this.oldest = this.inflight === 0 ? this.nextResp : this.firstBusy(s);
    return n;
  }

  /** The first busy slot from `s` on (the oldest call still in flight). */
  private firstBusy(s: number): number {
    const mask = this.respMask;
    for (let k = 0; k <= mask; k++, s = (s + 1) & mask) if (this.busy[s] !== 0) return s;
    return this.nextResp;
  }

  /** A response is waiting (what wait() and waitSync() wait for; they fail with ServerDisconnected when the server goes away first). */
  ready(): boolean {
    if (this.closed) throw this.closedError('wait');
    let left = this.inflight;
    const mask = this.respMask;
    for (let k = 0, s = this.oldest; k <= mask && left > 0; k++, s = (s + 1) & mask) {
      if (this.busy[s] === 0) continue;
      left--;
      if (Atomics.load(this.u8, this.respBase + s * this.layout.respSlot) === 1) return true;
    }
    return false;
  }

  /** Detaches: the id is freed once the server has answered what is still in flight. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    Atomics.store(this.i32, this.base + CLIENT.PHASE, PHASE_IDLE);
    this.forget();
  }

  /**
   * After close: the id goes back (or to the server while calls fly), and this object
   * forgets its calls. Their answers are the server's to drop; once the id has a new owner,
   * its response slots are that client's.
   */
  private forget(): void {
    this.leave();
    this.busy.fill(0);
    this.users.fill(undefined);
    this.inflight = 0;
  }

  private closedError(what: string): WeftError {
    return new WeftError('ECLOSED', `DelegationClient ${this.clientId} of ${this.name}: ${what} after close(): the calls in flight were given up (their answers are dropped); connect again`);
  }

  /**
   * Hands the id back (RELEASED, its owner words cleared first so the next claimer reads as
   * "not written yet", never as this thread), or to the server (CLOSING) while calls fly.
   */
  private leave(): void {
    if (this.inflight === 0) {
      clearClientRecord(this.i32, this.base);
    }
    Atomics.store(this.i32, this.base + CLIENT.STATE, this.inflight === 0 ? CLIENT_RELEASED : CLIENT_CLOSING);
  }

  protected override checkWait(what: string): void {
    if (this.inflight === 0) throw new WeftError('EINVAL', `DelegationClient ${this.clientId}: ${what} with no call in flight would never end`);
  }

  protected plan(what: string, options: WaitOptions): WaitPlan {
    return {
      oversubscribed: attachedClients(this.i32, this.layout) + 1 > availableParallelism(),
      call: { deadline: new Deadline(options.timeoutMs ?? this.timeoutMs, options.signal), what: `DelegationClient ${this.clientId} of ${this.name}: ${what}` },
      probe: () => this.watch.check(what),
    };
  }

  /** The ring is full at `pos`: wait for the server's tail. On failure the position is abandoned. */
  private waitForSpace(pos: number): void {
    this.pendingPos = pos;
    try {
      waitSync(this.hasSpace, this.tailBell, this.plan('call (waiting for ring space)', {}));
    } catch (err) {
      // The slot stays reserved but unwritten: mark it abandoned so the server skips it.
      this.i32[this.base + CLIENT.PHASE] = PHASE_ABANDONED;
      this.closed = true;
      this.forget();
      // The client cannot go on with a position it gave up: say so, and what to do.
      if (err instanceof WeftError) err.message += `; client ${this.clientId} is closed now (its ring position was given up): connect again`;
      throw err;
    }
  }

  private readonly hasSpace = () => (this.pendingPos - (this.tailSeen = Atomics.load(this.i32, TAIL_W))) >>> 0 < this.layout.ringDepth;
}

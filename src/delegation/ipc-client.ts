/**
 * A client of ipc: its own request ring and response ring in the server's segment, at most
 * `depth` calls in flight (per-client back-pressure: call() returns false beyond that).
 *
 * @example
 * ```ts
 * import { IpcClient } from 'weftjs/delegation';
 * const client = IpcClient.connect(serverName);
 * client.call(new Uint8Array(32), 'token');
 * while (client.poll((token, response) => console.log(token, response)) === 0) client.waitSync({ timeoutMs: 1000 });
 * client.close();
 * ```
 */
import { availableParallelism } from 'node:os';
import { WeftError } from '../errors.js';
import { FutexBell, ringBell } from '../host/futex-bell.js';
import { plainPublishAllowed } from '../host/remote-fence.js';
import type { WaitPlan } from '../host/wait.js';
import { Deadline, type WaitOptions } from '../util/deadline.js';
import { claimId } from './claim.js';
import { ServerDisconnected } from './errors.js';
import { clientBlock, ICLI, IH, IPC_ATTACHED, IPC_CLOSING, IPC_RELEASED, ISRV, readIpcHeader, type IpcLayout } from './ipc-layout.js';
import { clearOwner, ownerAlive, writeOwner } from './owner.js';
import { openLayerSegment } from './segment.js';
import { ServerWatch } from './server-watch.js';
import { StampedRing } from './stamped-ring.js';
import { Waiter } from './waiter.js';

export interface IpcClientOptions {
  /** Expected request size: a mismatch with the server's is refused at connect. */
  requestBytes?: number;
  /** Expected response size: a mismatch with the server's is refused at connect. */
  responseBytes?: number;
  /** Default timeout of waits (default WEFT_TIMEOUT_MS or 30 s). */
  timeoutMs?: number;
}

export class IpcClient<U = unknown> extends Waiter {
  readonly clientId: number;
  readonly layout: IpcLayout;
  private readonly name: string;
  private readonly i32: Int32Array;
  private readonly line: number;
  private readonly srv = IH.SERVER >> 2;
  private readonly req: StampedRing;
  private readonly resp: StampedRing;
  private readonly free: Int32Array;
  private readonly busy: Uint8Array;
  private readonly users: (U | undefined)[];
  protected readonly bell: FutexBell;
  private readonly watch: ServerWatch;
  private readonly timeoutMs?: number;
  private freeTop: number;
  private reqPos: number;
  private respPos: number;
  private inflight = 0;
  private openTag = -1;
  private closed = false;

  private constructor(name: string, sab: SharedArrayBuffer, layout: IpcLayout, id: number, o: IpcClientOptions) {
    super();
    this.name = name;
    this.layout = layout;
    this.clientId = id;
    this.i32 = new Int32Array(sab);
    this.line = clientBlock(layout, id) >> 2;
    const b = clientBlock(layout, id) + 64;
    // The server wrote whether sleepers fence (IH.FENCES): then this client's sleeps fence, and
    // its requests are published with plain stores where this process registered.
    const fences = Atomics.load(this.i32, IH.FENCES >> 2) === 1;
    this.req = new StampedRing(this.i32, b, layout.depth, layout.reqSlot, layout.requestBytes, fences && plainPublishAllowed());
    this.resp = new StampedRing(this.i32, b + layout.depth * layout.reqSlot, layout.depth, layout.respSlot, layout.responseBytes);
    this.free = new Int32Array(layout.depth);
    for (let t = 0; t < layout.depth; t++) this.free[t] = layout.depth - 1 - t;
    this.freeTop = layout.depth;
    this.busy = new Uint8Array(layout.depth);
    this.users = new Array<U | undefined>(layout.depth).fill(undefined);
    this.bell = new FutexBell(this.i32, this.line + ICLI.SLEEPING, this.line + ICLI.BELL, fences);
    this.timeoutMs = o.timeoutMs;
    this.watch = new ServerWatch(this.i32, IH.SERVER_ALIVE >> 2, this.i32, this.srv + ISRV.STATE, `IpcClient ${id}`, name, () => `${this.inflight} call(s) in flight are lost`);
    // A released id resumes where its previous owner (or the server, for a dead one) left it.
    this.reqPos = Atomics.load(this.i32, this.line + ICLI.RESUME_REQ);
    this.respPos = Atomics.load(this.i32, this.line + ICLI.RESUME_RESP);
  }

  /** Maps the server's segment, checks it, claims a client id (EINVAL when all are taken). */
  static connect<U = unknown>(name: string, options: IpcClientOptions = {}): IpcClient<U> {
    const sab = openLayerSegment(name, 'IpcClient.connect');
    const layout = readIpcHeader(sab, name);
    for (const k of ['requestBytes', 'responseBytes'] as const) {
      if (options[k] !== undefined && options[k] !== layout[k]) throw new WeftError('EINVAL', `IpcClient.connect: ${k} ${options[k]}, but the server at ${name} uses ${layout[k]}`);
    }
    const i32 = new Int32Array(sab);
    if (Atomics.load(i32, IH.SERVER_ALIVE >> 2) !== 1 || !ownerAlive(i32, IH.SERVER >> 2)) throw new ServerDisconnected(`IpcClient.connect: the server of ${name} is gone (closed or dead); start it again and connect to the name it reports`);
    const id = claimId(i32, IH.NEXT_CLIENT_ID >> 2, layout.maxClients, (c) => (clientBlock(layout, c) >> 2) + ICLI.STATE);
    if (id < 0) throw new WeftError('EINVAL', `IpcClient.connect: ${name} already has maxClients = ${layout.maxClients} clients; close one, or create the server with a larger maxClients`);
    // The owner right after the claim: the server reaps a CLAIMING id whose owner is written
    // and dead, so a thread killed while it builds its views (milliseconds at a large depth)
    // does not leak the id.
    const line = clientBlock(layout, id) >> 2;
    writeOwner(i32, line);
    let client: IpcClient<U>;
    try {
      client = new IpcClient<U>(name, sab, layout, id, options);
    } catch (err) {
      clearOwner(i32, line);
      Atomics.store(i32, line + ICLI.STATE, IPC_RELEASED); // nothing was sent: the resume positions stand
      throw err;
    }
    Atomics.store(i32, line + ICLI.STATE, IPC_ATTACHED);
    return client;
  }

  get inFlight(): number {
    return this.inflight;
  }

  /** Sends `payload` with `userData` for poll(); false when `depth` calls are in flight. */
  call(payload: Uint8Array, userData?: U): boolean {
    if (payload.length > this.layout.requestBytes) throw new WeftError('EINVAL', `IpcClient ${this.clientId}: request of ${payload.length} bytes, the server at ${this.name} takes ${this.layout.requestBytes}`);
    if (this.begin(userData) === null) return false;
    this.req.fill(this.reqPos, payload);
    this.commit();
    return true;
  }

  /**
   * Reserves the next request slot and returns its bytes to fill; null when `depth` calls are
   * in flight. The view is the client's until commit(), or until close(), which abandons it.
   */
  begin(userData?: U): Uint8Array | null {
    if (this.closed) throw new WeftError('ECLOSED', `IpcClient ${this.clientId} of ${this.name} is closed`);
    if (this.openTag >= 0) throw new WeftError('EINVAL', `IpcClient ${this.clientId}: begin() twice without commit()`);
    if (this.freeTop === 0) {
      this.watch.onIdle('call');
      return null;
    }
    this.watch.onCall();
    const tag = this.free[--this.freeTop];
    this.users[tag] = userData;
    this.openTag = tag;
    return this.req.payload(this.reqPos);
  }

  /** Publishes the request begun by begin(); ECLOSED after close(), which abandoned it. */
  commit(): void {
    // After close() the id may have a new owner, and this slot is its ring's.
    if (this.closed) throw new WeftError('ECLOSED', `IpcClient ${this.clientId} of ${this.name}: commit() after close(): the request begun was abandoned; connect again to send it`);
    const tag = this.openTag;
    if (tag < 0) throw new WeftError('EINVAL', `IpcClient ${this.clientId}: commit() without begin()`);
    this.openTag = -1;
    this.busy[tag] = 1;
    this.req.publish(this.reqPos, tag);
    this.reqPos = (this.reqPos + 1) | 0;
    this.inflight++;
    ringBell(this.i32, this.srv + ISRV.SLEEPING, this.srv + ISRV.BELL);
  }

  /** Delivers the responses that arrived, in the server's order; returns how many. */
  poll(onResponse?: (userData: U, response: Uint8Array, tag: number) => void): number {
    if (this.closed) throw this.closedError('poll');
    let n = 0;
    const ring = this.resp;
    while (this.inflight > 0 && (n === 0 ? ring.ready(this.respPos) : ring.readyNext(this.respPos))) {
      const pos = this.respPos;
      this.respPos = (pos + 1) | 0;
      const tag = ring.tag(pos);
      if (tag >>> 0 >= this.layout.depth || this.busy[tag] === 0) {
        throw new WeftError('EPROTO', `IpcClient ${this.clientId}: response at ${pos >>> 0} carries tag ${tag}, which names no call in flight: dropped; something other than the server wrote into the response ring`);
      }
      const user = this.users[tag] as U;
      this.users[tag] = undefined;
      n++;
      // The call stays in flight during the callback: a call made from it cannot take the
      // last free tag and let the server answer into the slot being read.
      try {
        onResponse?.(user, ring.payload(pos), tag);
      } finally {
        this.busy[tag] = 0;
        this.free[this.freeTop++] = tag;
        this.inflight--;
      }
    }
    if (n === 0 && this.inflight > 0) this.watch.onIdle('poll');
    return n;
  }

  ready(): boolean {
    if (this.closed) throw this.closedError('wait');
    return this.inflight > 0 && this.resp.ready(this.respPos);
  }

  private closedError(what: string): WeftError {
    return new WeftError('ECLOSED', `IpcClient ${this.clientId} of ${this.name}: ${what} after close(): the calls in flight were given up (their answers are dropped); connect again`);
  }

  /**
   * Detaches; the id is reusable once the server answered what is in flight. A request
   * begun and not committed is abandoned (commit() then throws ECLOSED).
   */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.openTag >= 0) {
      this.users[this.openTag] = undefined;
      this.free[this.freeTop++] = this.openTag;
      this.openTag = -1;
    }
    if (this.inflight === 0) {
      clearOwner(this.i32, this.line);
      Atomics.store(this.i32, this.line + ICLI.RESUME_REQ, this.reqPos);
      Atomics.store(this.i32, this.line + ICLI.RESUME_RESP, this.respPos);
      Atomics.store(this.i32, this.line + ICLI.STATE, IPC_RELEASED);
    } else {
      Atomics.store(this.i32, this.line + ICLI.STATE, IPC_CLOSING);
    }
    // The answers still owed are the server's to drop: once the id has a new owner, its
    // response ring is that client's.
    this.users.fill(undefined);
  }

  protected override checkWait(what: string): void {
    if (this.inflight === 0) throw new WeftError('EINVAL', `IpcClient ${this.clientId}: ${what} with no call in flight would never end`);
  }

  protected plan(what: string, options: WaitOptions): WaitPlan {
    return {
      oversubscribed: this.attached() + 1 > availableParallelism(),
      call: { deadline: new Deadline(options.timeoutMs ?? this.timeoutMs, options.signal), what: `IpcClient ${this.clientId} of ${this.name}: ${what}` },
      probe: () => this.watch.check(what),
    };
  }

  private attached(): number {
    let n = 0;
    for (let c = 0; c < this.layout.maxClients; c++) if (Atomics.load(this.i32, (clientBlock(this.layout, c) >> 2) + ICLI.STATE) === IPC_ATTACHED) n++;
    return n;
  }
}

/**
 * The server of ipc: each client has its own request ring and response ring (SPSC, no
 * contention between clients), and the server drains them in turn (flat combining): a turn
 * takes at most `depth` requests, and a long-idle client is looked at only every
 * SKIP_EVERY-th visit. Per-client back-pressure: a client has at most `depth` calls in
 * flight, so its rings never overflow.
 *
 * @example
 * ```ts
 * import { IpcServer } from 'weftjs/delegation';
 * const server = IpcServer.create({ maxClients: 8, depth: 64, requestBytes: 32, responseBytes: 32 });
 * for (;;) {
 *   const r = server.recv();
 *   if (r === null) { server.waitSync({ timeoutMs: 60_000 }); continue; }
 *   server.reply(r.clientId, r.tag, r.payload);
 * }
 * ```
 */
import { availableParallelism } from 'node:os';
import { WeftError } from '../errors.js';
import { loadAcquire } from '../host/acquire.js';
import { FutexBell, ringBell } from '../host/futex-bell.js';
import { joinRemoteFences, plainPublishAllowed } from '../host/remote-fence.js';
import type { WaitPlan } from '../host/wait.js';
import { Deadline, type WaitOptions } from '../util/deadline.js';
import { REAP_DEAD, reapIfDead } from './claim.js';
import {
  checkIpcGeometry, clientBlock, ICLI, IH, IPC_ATTACHED, IPC_CLAIMING, IPC_CLOSING, IPC_DEAD, IPC_RELEASED, ipcLayoutOf, ISRV, writeIpcHeader, type IpcGeometry, type IpcLayout,
} from './ipc-layout.js';
import { clearOwner, writeOwner } from './owner.js';
import { createLayerSegment, defaultJob, removeLayerSegment } from './segment.js';
import { StampedRing } from './stamped-ring.js';
import { Waiter } from './waiter.js';

/** Options of IpcServer.create. */
export interface IpcServerOptions extends Partial<IpcGeometry> {
  /** Job name the segment is filed under (default WEFT_JOB or 'weft'). */
  job?: string;
  /** How often the server checks that its clients' threads still live. */
  reapIntervalMs?: number;
}

/**
 * A request taken by recv(). The object is reused by the next recv() (take what you need out
 * of it); its payload view stays valid until reply() for this request, no longer: once the
 * client has its answer it may send a request that lands in the same slot.
 */
export interface IpcRequest {
  clientId: number;
  /** The call's tag: pass to reply(). */
  tag: number;
  payload: Uint8Array;
}

/** A client found idle this many visits in a row... */
const IDLE_AFTER = 64;
/** ...is looked at only every this many visits. */
const SKIP_EVERY = 8;
/** recv() calls between two refresh()es (admitting, reaping, releasing) of a busy server (a power of two). */
const REFRESH_EVERY = 1024;

export class IpcServer extends Waiter {
  readonly name: string;
  readonly layout: IpcLayout;
  readonly stats = { clientsReaped: 0, malformed: 0 };
  private readonly i32: Int32Array;
  private readonly reqRings: StampedRing[] = [];
  private readonly respRings: StampedRing[] = [];
  private readonly cursor: Int32Array;
  private readonly respPos: Int32Array;
  private readonly outstanding: Int32Array;
  /** owed[client * depth + tag]: recv() gave that request and reply() has not answered it. */
  private readonly owed: Uint8Array;
  private readonly idle: Int32Array;
  private readonly live: Uint8Array;
  private readonly entry: IpcRequest;
  protected readonly bell: FutexBell;
  private readonly reapIntervalMs: number;
  private limit = 0;
  private at = 0;
  private pass = 0;
  private calls = 0;
  /** recv() is draining the client at `at` (its last slot was ready): see StampedRing.readyNext. */
  private draining = false;
  /** Requests taken in the current turn of the client at `at`. */
  private turn = 0;
  private lastReap = 0;
  private closed = false;

  private constructor(name: string, sab: SharedArrayBuffer, layout: IpcLayout, o: IpcServerOptions, fences: boolean) {
    super();
    this.name = name;
    this.layout = layout;
    this.i32 = new Int32Array(sab);
    for (let c = 0; c < layout.maxClients; c++) {
      const b = clientBlock(layout, c) + 64;
      this.reqRings.push(new StampedRing(this.i32, b, layout.depth, layout.reqSlot, layout.requestBytes));
      this.respRings.push(new StampedRing(this.i32, b + layout.depth * layout.reqSlot, layout.depth, layout.respSlot, layout.responseBytes, fences && plainPublishAllowed()));
    }
    const n = layout.maxClients;
    this.cursor = new Int32Array(n);
    this.respPos = new Int32Array(n);
    this.outstanding = new Int32Array(n);
    this.owed = new Uint8Array(n * layout.depth);
    this.idle = new Int32Array(n);
    this.live = new Uint8Array(n);
    this.entry = { clientId: 0, tag: 0, payload: this.reqRings[0].payload(0) };
    this.bell = new FutexBell(this.i32, (IH.SERVER >> 2) + ISRV.SLEEPING, (IH.SERVER >> 2) + ISRV.BELL, fences);
    this.reapIntervalMs = o.reapIntervalMs ?? 100;
  }

  /** Creates the segment (0600, /dev/shm) and starts serving it. */
  static create(options: IpcServerOptions = {}): IpcServer {
    const g: IpcGeometry = { maxClients: options.maxClients ?? 16, depth: options.depth ?? 64, requestBytes: options.requestBytes ?? 32, responseBytes: options.responseBytes ?? 32 };
    checkIpcGeometry(g, 'IpcServer.create');
    const layout = ipcLayoutOf(g);
    const { name, sab } = createLayerSegment(options.job ?? defaultJob(), 'ipc', layout.total);
    // Sleepers fence where membarrier is offered: publishers may then use plain stores.
    const fences = joinRemoteFences();
    writeIpcHeader(new DataView(sab), layout, fences);
    const server = new IpcServer(name, sab, layout, options, fences);
    writeOwner(server.i32, IH.SERVER >> 2);
    Atomics.store(server.i32, (IH.SERVER >> 2) + ISRV.STATE, 1);
    Atomics.store(server.i32, IH.SERVER_ALIVE >> 2, 1);
    return server;
  }

  /**
   * The next request of any client, taking up to `depth` from one client before moving to
   * the next; null after a pass that found nothing.
   */
  recv(): IpcRequest | null {
    // A busy server makes no empty pass: admit, reap and release from here too.
    this.calls = (this.calls + 1) | 0; // a small integer for good
    if ((this.calls & (REFRESH_EVERY - 1)) === 0) this.refresh();
    // A client that refills as it is drained would keep the turn forever.
    if (this.turn >= this.layout.depth) this.endTurn(this.at);
    const n = this.limit;
    for (let visited = 0; visited < n; visited++) {
      const c = this.at;
      if (this.live[c] !== 0) {
        const idle = this.idle[c];
        if (idle <= IDLE_AFTER) {
          const pos = this.cursor[c];
          const ring = this.reqRings[c];
          // While a client is being drained, its next slots need acquire order only.
          if (this.draining ? ring.readyNext(pos) : ring.ready(pos)) {
            this.draining = true;
            this.turn++;
            this.idle[c] = 0;
            this.cursor[c] = (pos + 1) | 0;
            const tag = ring.tag(pos);
            if (tag >>> 0 >= this.layout.depth) {
              this.stats.malformed++;
              throw new WeftError('EPROTO', `ipc server ${this.name}: client ${c}'s request at ${pos >>> 0} has tag ${tag}, out of [0, ${this.layout.depth}): dropped; something other than a weft client wrote into its ring`);
            }
            const index = c * this.layout.depth + tag;
            if (this.owed[index] !== 0) {
              this.stats.malformed++;
              throw new WeftError('EPROTO', `ipc server ${this.name}: client ${c}'s request at ${pos >>> 0} has tag ${tag}, which an earlier request still waits on: dropped; something other than a weft client wrote into its ring`);
            }
            this.owed[index] = 1;
            this.outstanding[c]++;
            const e = this.entry;
            e.clientId = c;
            e.tag = tag;
            e.payload = ring.payload(pos);
            return e;
          }
        }
        // Counted per visit, busy server or not; past IDLE_AFTER it cycles through SKIP_EVERY
        // values, looking at the client at the first.
        this.idle[c] = idle < IDLE_AFTER + SKIP_EVERY - 1 ? idle + 1 : IDLE_AFTER;
      }
      this.endTurn(c);
    }
    if ((++this.pass & 255) === 0 || n === 0) this.refresh();
    return null;
  }

  /** Moves on from client c to the next. */
  private endTurn(c: number): void {
    this.draining = false;
    this.turn = 0;
    this.at = c + 1 >= this.limit ? 0 : c + 1;
  }

  /** The view to fill for client c's next response, before reply(c, tag) without a payload. */
  responseView(clientId: number): Uint8Array {
    this.checkClient(clientId, 'responseView');
    return this.respRings[clientId].payload(this.respPos[clientId]);
  }

  /** Answers client `clientId`'s call `tag`, copying `payload` (omit it after filling responseView). */
  reply(clientId: number, tag: number, payload?: Uint8Array): void {
    this.checkClient(clientId, 'reply');
    // Every check before the count goes down: a refused reply must leave it as it was, or a
    // closing client's id is freed while an answer is still owed (and its next owner gets it).
    if (payload !== undefined && payload.length > this.layout.responseBytes) throw new WeftError('EINVAL', `ipc server ${this.name}: reply to client ${clientId} of ${payload.length} bytes, responses are ${this.layout.responseBytes} bytes: send at most that many`);
    if (tag >>> 0 >= this.layout.depth) throw new WeftError('EINVAL', `ipc server ${this.name}: reply to client ${clientId} with tag ${tag}, out of [0, ${this.layout.depth}): pass the tag recv() gave`);
    if (this.outstanding[clientId] <= 0) throw new WeftError('EINVAL', `ipc server ${this.name}: reply to client ${clientId}, which has no request waiting for one: answer each request recv() gave once`);
    // Per tag too: a second answer to one request would reach the tag's next call.
    const index = clientId * this.layout.depth + tag;
    if (this.owed[index] === 0) throw new WeftError('EINVAL', `ipc server ${this.name}: reply to client ${clientId} with tag ${tag}, which has no request waiting for one: answer each request recv() gave once`);
    this.owed[index] = 0;
    const left = --this.outstanding[clientId];
    const line = (clientBlock(this.layout, clientId) >> 2);
    const state = loadAcquire(this.i32, line + ICLI.STATE);
    // A closing client is answered even when its thread has gone: no one else owns the ring
    // until the id is released, and the next owner resumes after these answers.
    if (state === IPC_ATTACHED || state === IPC_CLOSING) {
      const ring = this.respRings[clientId];
      const pos = this.respPos[clientId];
      if (payload !== undefined) ring.fill(pos, payload);
      ring.publish(pos, tag);
      this.respPos[clientId] = (pos + 1) | 0;
      ringBell(this.i32, line + ICLI.SLEEPING, line + ICLI.BELL);
    }
    if ((state === IPC_CLOSING || state === IPC_DEAD) && left <= 0) this.release(clientId, state);
  }

  /** Some client has a request waiting (what wait() waits for). */
  ready(): boolean {
    if (this.closed) return true;
    this.refresh();
    for (let c = 0; c < this.limit; c++) if (this.live[c] !== 0 && this.reqRings[c].ready(this.cursor[c])) return true;
    return false;
  }

  /** Marks the server gone (clients fail with ServerDisconnected) and unlinks the segment. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    Atomics.store(this.i32, IH.SERVER_ALIVE >> 2, 0);
    Atomics.store(this.i32, (IH.SERVER >> 2) + ISRV.STATE, 0);
    for (let c = 0; c < this.layout.maxClients; c++) {
      const line = clientBlock(this.layout, c) >> 2;
      Atomics.add(this.i32, line + ICLI.BELL, 1);
      ringBell(this.i32, line + ICLI.SLEEPING, line + ICLI.BELL);
    }
    removeLayerSegment(this.name);
  }

  protected plan(what: string, options: WaitOptions): WaitPlan {
    let attached = 0;
    for (let c = 0; c < this.limit; c++) attached += this.live[c];
    return {
      oversubscribed: attached + 1 > availableParallelism(),
      call: { deadline: new Deadline(options.timeoutMs, options.signal), what: `ipc server ${this.name}: ${what} for requests` },
      probe: () => this.refresh(),
    };
  }

  private checkClient(c: number, what: string): void {
    if (!(c >>> 0 === c && c < this.layout.maxClients)) throw new WeftError('EINVAL', `ipc server ${this.name}: ${what}: client id ${c} out of [0, ${this.layout.maxClients})`);
  }

  /**
   * Re-reads which clients are attached; every reapIntervalMs, detaches dead ones: attached
   * ones, and ones killed while claiming their id. A closing client is not reaped: everything
   * it sent is in its ring, and is served to the end whether its thread lives or not.
   */
  private refresh(): void {
    const reap = performance.now() - this.lastReap >= this.reapIntervalMs;
    if (reap) this.lastReap = performance.now();
    let limit = 0;
    for (let c = 0; c < this.layout.maxClients; c++) {
      const line = clientBlock(this.layout, c) >> 2;
      let state = Atomics.load(this.i32, line + ICLI.STATE);
      if (reap && (state === IPC_ATTACHED || state === IPC_CLAIMING)) {
        if (reapIfDead(this.i32, line, state) === REAP_DEAD) this.stats.clientsReaped++;
        state = Atomics.load(this.i32, line + ICLI.STATE);
      }
      if ((state === IPC_DEAD || state === IPC_CLOSING) && this.outstanding[c] <= 0) {
        this.release(c, state);
        state = Atomics.load(this.i32, line + ICLI.STATE);
      }
      const live = state === IPC_ATTACHED || state === IPC_CLOSING ? 1 : 0;
      if (live && this.live[c] === 0) this.idle[c] = 0;
      this.live[c] = live;
      if (live) limit = c + 1;
    }
    this.limit = limit;
    if (this.at >= limit) this.endTurn(limit);
  }

  /**
   * Frees client c's id (CLOSING or DEAD) once nothing more will be written for it: a dead
   * client's unread requests are dropped; a closing one is served to the end first. A later
   * owner of the id resumes both rings where this one left them.
   */
  private release(c: number, from: number): void {
    const ring = this.reqRings[c];
    if (from === IPC_CLOSING && ring.ready(this.cursor[c])) return;
    for (let k = 0; k < this.layout.depth && ring.ready(this.cursor[c]); k++) this.cursor[c] = (this.cursor[c] + 1) | 0;
    const line = clientBlock(this.layout, c) >> 2;
    this.outstanding[c] = 0;
    this.owed.fill(0, c * this.layout.depth, (c + 1) * this.layout.depth);
    Atomics.store(this.i32, line + ICLI.RESUME_REQ, this.cursor[c]);
    Atomics.store(this.i32, line + ICLI.RESUME_RESP, this.respPos[c]);
    // A thread that died asleep in a wait never took itself off the sleeper count: every
    // reply to the id's next owner would then pay a futex wake.
    if (from === IPC_DEAD) Atomics.store(this.i32, line + ICLI.SLEEPING, 0);
    // Only the server moves an id out of CLOSING or DEAD: the owner words are its to clear.
    clearOwner(this.i32, line);
    if (Atomics.compareExchange(this.i32, line + ICLI.STATE, from, IPC_RELEASED) === from) this.live[c] = 0;
  }
}

/**
 * The server side of delegationrpc: one thread (a daemon) drains a shared MPSC request ring
 * that any number of client threads and processes write with a fetch_add and a commit
 * (section 2.2 of the design notes). It answers into each client's own response slots.
 *
 * @example
 * ```ts
 * import { DelegationServer } from 'weftjs/delegation';
 * const server = DelegationServer.create({ maxClients: 4, ringDepth: 1024, respDepth: 64, requestBytes: 32, responseBytes: 32 });
 * // give server.name to the clients (a worker's workerData, a child's argv)
 * for (;;) {
 *   if (server.poll() === 0) { server.waitSync({ timeoutMs: 60_000 }); continue; }
 *   for (let e = server.recv(); e !== null; e = server.recv()) server.reply(e.clientId, e.respSlot, e.payload);
 *   server.advanceTail();
 * }
 * ```
 */
import { availableParallelism } from 'node:os';
import { WeftError } from '../errors.js';
import { loadAcquire } from '../host/acquire.js';
import { ShortCopier } from '../host/copy.js';
import { ringBell, FutexBell } from '../host/futex-bell.js';
import { joinRemoteFences, plainPublishAllowed } from '../host/remote-fence.js';
import type { WaitPlan } from '../host/wait.js';
import { Deadline, type WaitOptions } from '../util/deadline.js';
import {
  attachedClients, checkGeometry, clearClientRecord, CLIENT, CLIENT_ATTACHED, CLIENT_CLAIMING, CLIENT_CLOSING, CLIENT_DEAD, CLIENT_RELEASED, clientWord, H, layoutOf, PHASE_RESERVED, PHASE_RESERVING,
  RESP, SERVER, SLOT, TAIL_EPOCH, writeHeader, type DelegationGeometry, type DelegationLayout,
} from './delegation-layout.js';
import { REAP_ALIVE, REAP_DEAD, reapIfDead } from './claim.js';
import { writeOwner } from './owner.js';
import { createLayerSegment, defaultJob, removeLayerSegment } from './segment.js';
import { Waiter } from './waiter.js';

/** Options of DelegationServer.create. */
export interface DelegationServerOptions extends Partial<DelegationGeometry> {
  /** Job name the segment is filed under (default WEFT_JOB or 'weft'). */
  job?: string;
  /**
   * How long a hole (a reserved slot not committed) may stall the ring before the server
   * asks whose it is; a hole whose owner is dead (or that nobody owns) is then skipped.
   */
  holeTimeoutMs?: number;
  /** How often a busy server checks that its clients' threads still live. */
  reapIntervalMs?: number;
}

/** A request taken off the ring; valid until the next advanceTail(). */
export interface RecvEntry {
  /** Who sent it: pass to reply(). */
  clientId: number;
  /** Which of the client's response slots the answer goes to: pass to reply(). */
  respSlot: number;
  /** The request's bytes, a view into the ring slot (requestBytes long). */
  payload: Uint8Array;
}

/** Counters of what the server did about faults. */
export interface DelegationServerStats {
  /** Holes skipped because their owner was dead or nobody owned them. */
  holesSkipped: number;
  /** Clients found dead and detached. */
  clientsReaped: number;
  /** Entries refused for a client id or response slot out of range. */
  malformed: number;
}

const HEAD_W = H.HEAD >> 2;
const TAIL_W = H.TAIL >> 2;

/** The server of one delegationrpc ring (the thread that creates it owns it). */
export class DelegationServer extends Waiter {
  /** The segment's name: what clients pass to DelegationClient.connect. */
  readonly name: string;
  readonly layout: DelegationLayout;
  readonly stats: DelegationServerStats = { holesSkipped: 0, clientsReaped: 0, malformed: 0 };
  private readonly u8: Uint8Array;
  private readonly i32: Int32Array;
  private readonly ringMask: number;
  private readonly srv: number;
  private readonly payloads: Uint8Array[] = [];
  private readonly replies: Uint8Array[] = [];
  private readonly outstanding: Int32Array;
  /** owed[client * respDepth + slot]: recv() gave that request and reply() has not answered it. */
  private readonly owed: Uint8Array;
  /** Requests recv() gave since the last advanceTail(): their ring slots are still the caller's. */
  private held = 0;
  /** Per client going away: the head when the server saw it go (see releaseWhenDrained). */
  private readonly fence: Int32Array;
  private readonly fenced: Uint8Array;
  private readonly entry: RecvEntry;
  protected readonly bell: FutexBell;
  private readonly holeTimeoutMs: number;
  private readonly reapIntervalMs: number;
  private cursor = 0;
  private cursorHi = 0;
  /** Committed requests the last poll() counted that recv() has not taken yet. */
  private counted = 0;
  private tail = 0;
  private holeActive = false;
  private holePos = 0;
  private holeSince = 0;
  private polls = 0;
  private lastReap = 0;
  private closed = false;
  /** This server's sleeps fence every registered process (published as SERVER.FENCES). */
  private readonly fences: boolean;
  /** Mark responses valid with a plain store: x86 and fences (clients' sleeps then fence too). */
  private readonly plainValid: boolean;
  private readonly copier = new ShortCopier();

  private constructor(name: string, sab: SharedArrayBuffer, layout: DelegationLayout, o: DelegationServerOptions) {
    super();
    this.name = name;
    this.layout = layout;
    this.u8 = new Uint8Array(sab);
    this.i32 = new Int32Array(sab);
    this.ringMask = layout.ringDepth - 1;
    this.srv = layout.ext >> 2;
    for (let i = 0; i < layout.ringDepth; i++) this.payloads.push(new Uint8Array(sab, H.RING + i * layout.reqSlot + SLOT.PAYLOAD, layout.requestBytes));
    for (let i = 0; i < layout.maxClients * layout.respDepth; i++) this.replies.push(new Uint8Array(sab, layout.respArea + i * layout.respSlot + RESP.PAYLOAD, layout.responseBytes));
    this.outstanding = new Int32Array(layout.maxClients);
    this.owed = new Uint8Array(layout.maxClients * layout.respDepth);
    this.fence = new Int32Array(layout.maxClients);
    this.fenced = new Uint8Array(layout.maxClients);
    this.entry = { clientId: 0, respSlot: 0, payload: this.payloads[0] };
    // Clients that may commit with a plain store (no fence) rely on this bell's sleeps fencing.
    this.fences = joinRemoteFences();
    this.plainValid = this.fences && plainPublishAllowed();
    this.bell = new FutexBell(this.i32, this.srv + SERVER.SLEEPING, this.srv + SERVER.BELL, this.fences);
    this.holeTimeoutMs = o.holeTimeoutMs ?? 100;
    this.reapIntervalMs = o.reapIntervalMs ?? 100;
  }

  /** Creates the ring's segment (0600, in /dev/shm) and starts serving it. */
  static create(options: DelegationServerOptions = {}): DelegationServer {
    const g: DelegationGeometry = {
      maxClients: options.maxClients ?? 16,
      ringDepth: options.ringDepth ?? 1024,
      respDepth: options.respDepth ?? 64,
      requestBytes: options.requestBytes ?? 32,
      responseBytes: options.responseBytes ?? 32,
    };
    checkGeometry(g, 'DelegationServer.create');
    for (const k of ['holeTimeoutMs', 'reapIntervalMs'] as const) {
      const v = options[k];
      if (v !== undefined && !(typeof v === 'number' && v > 0)) throw new WeftError('EINVAL', `DelegationServer.create: ${k} must be a positive number of milliseconds, got ${String(v)}`);
    }
    const layout = layoutOf(g);
    const { name, sab } = createLayerSegment(options.job ?? defaultJob(), 'dlgrpc', layout.total);
    writeHeader(new DataView(sab), layout);
    const server = new DelegationServer(name, sab, layout, options);
    writeOwner(server.i32, server.srv);
    Atomics.store(server.i32, server.srv + SERVER.FENCES, server.fences ? 1 : 0);
    Atomics.store(server.i32, server.srv + SERVER.STATE, 1);
    Atomics.store(server.u8, H.SERVER_ALIVE, 1);
    return server;
  }

  /**
   * Counts the committed requests from the cursor up to the first hole (a slot reserved
   * but not yet committed); recv() then takes them. A hole that outlives holeTimeoutMs is
   * examined: skipped when its owner is dead or nobody owns it.
   *
   * The notes bound the scan by a snapshot of head; this scan does without it, since every
   * client fetch_adds head and a server reading it on every poll would pull its cache line
   * away from them. A slot past head cannot be committed: its previous lap is behind the
   * cursor, so the server cleared it, and a client writes position p only once p - tail <
   * ring_depth (and tail never passes the cursor). So the run of committed slots from the
   * cursor ends where the notes' scan ends: at head or at the first hole. Head is read every
   * 256th empty poll, to tell a hole (head past the cursor) from an empty ring.
   */
  poll(): number {
    const u8 = this.u8;
    const mask = this.ringMask;
    const slot = this.layout.reqSlot;
    let p = this.cursor;
    if (Atomics.load(u8, H.RING + (p & mask) * slot) !== 1) {
      this.counted = 0;
      if ((++this.polls & 255) === 0) {
        this.checkHole();
        if ((this.polls & 1023) === 0) this.maybeReap();
      }
      return 0;
    }
    const depth = this.layout.ringDepth;
    // The first slot was loaded with Atomics above; the later ones need acquire order only.
    // At most one lap: committed flags a hostile process set cannot make this loop long.
    let n = 1;
    p = (p + 1) | 0;
    while (n < depth && loadAcquire(u8, H.RING + (p & mask) * slot) === 1) {
      p = (p + 1) | 0;
      n++;
    }
    this.counted = n;
    this.holeActive = false;
    if ((++this.polls & 1023) === 0) this.maybeReap();
    return n;
  }

  /**
   * Takes the next request the last poll() counted, or null when it counted no more (call
   * poll() first: it read each slot's committed flag, and recv does not read it again).
   */
  recv(): RecvEntry | null {
    if (this.counted === 0) return null;
    this.counted--;
    const p = this.cursor;
    const off = H.RING + (p & this.ringMask) * this.layout.reqSlot;
    const clientId = this.i32[(off + SLOT.CLIENT_ID) >> 2] >>> 0;
    const respSlot = this.i32[(off + SLOT.RESP_SLOT) >> 2] >>> 0;
    // A plain store is enough: clients write this slot again only after they have read (with
    // Atomics) a tail that advanceTail() published (with Atomics) after this store.
    this.u8[off] = 0;
    this.step();
    if (clientId >= this.layout.maxClients || respSlot >= this.layout.respDepth) {
      this.stats.malformed++;
      throw new WeftError('EPROTO', `delegationrpc server ${this.name}: request at position ${p >>> 0} names client ${clientId} and response slot ${respSlot} (max_clients ${this.layout.maxClients}, resp_depth ${this.layout.respDepth}): dropped; something other than a weft client wrote into the ring`);
    }
    const index = clientId * this.layout.respDepth + respSlot;
    if (this.owed[index] !== 0) {
      this.stats.malformed++;
      throw new WeftError('EPROTO', `delegationrpc server ${this.name}: request at position ${p >>> 0} names client ${clientId}'s response slot ${respSlot}, which an earlier request still waits on: dropped; something other than a weft client wrote into the ring`);
    }
    this.owed[index] = 1;
    this.held++;
    this.outstanding[clientId]++;
    const e = this.entry;
    e.clientId = clientId;
    e.respSlot = respSlot;
    e.payload = this.payloads[p & this.ringMask];
    return e;
  }

  /**
   * Publishes the cursor as the ring's tail: clients waiting for space go on, and the slots of
   * the requests recv() gave are theirs again (the entries' payload views are then stale).
   */
  advanceTail(): void {
    this.held = 0;
    this.publishTail();
  }

  private publishTail(): void {
    const c = this.cursor;
    if (c === this.tail) return;
    this.tail = c;
    if (this.i32[TAIL_W + 1] !== this.cursorHi) Atomics.store(this.i32, TAIL_W + 1, this.cursorHi);
    Atomics.store(this.i32, TAIL_W, c);
    ringBell(this.i32, this.srv + SERVER.TAIL_SLEEPING, this.srv + SERVER.TAIL_BELL);
  }

  /** The response payload view of (client, slot): fill it, then reply(client, slot). */
  responseView(clientId: number, respSlot: number): Uint8Array {
    return this.replies[this.slotIndex(clientId, respSlot, 'responseView')];
  }

  /**
   * Answers a request: copies `payload` (at most responseBytes; omit it after filling
   * responseView) into the client's response slot and marks it valid. A client that closed
   * or died meanwhile is not written to.
   */
  reply(clientId: number, respSlot: number, payload?: Uint8Array): void {
    const index = this.slotIndex(clientId, respSlot, 'reply');
    // Every check before the count goes down: a refused reply that still counted would let the
    // id be released with an answer owed, and that answer would reach the id's next owner.
    if (payload !== undefined && payload.length > this.layout.responseBytes) throw new WeftError('EINVAL', `delegationrpc server ${this.name}: reply of ${payload.length} bytes, the ring's responses are ${this.layout.responseBytes} bytes`);
    if (this.outstanding[clientId] <= 0) throw new WeftError('EINVAL', `delegationrpc server ${this.name}: reply to client ${clientId}, which has no request waiting for one: answer each request recv() gave once`);
    // Per slot too: a second answer to one request would overwrite, or stay for, the slot's
    // next call, and the real answer to another request of this client would then be refused.
    if (this.owed[index] === 0) throw new WeftError('EINVAL', `delegationrpc server ${this.name}: reply to client ${clientId}'s response slot ${respSlot}, which has no request waiting for one: answer each request recv() gave once`);
    this.owed[index] = 0;
    const left = --this.outstanding[clientId];
    const base = this.clientBase(clientId);
    const state = loadAcquire(this.i32, base + CLIENT.STATE);
    if (state === CLIENT_ATTACHED || state === CLIENT_CLOSING) {
      if (payload !== undefined) {
        this.copier.copy(this.u8, this.i32, this.layout.respArea + index * this.layout.respSlot + RESP.PAYLOAD, payload, payload.length);
      }
      // Plain where the client said its sleeps fence (CLIENT.FENCES, on the line just read).
      const valid = this.layout.respArea + index * this.layout.respSlot + RESP.VALID;
      if (this.plainValid && loadAcquire(this.i32, base + CLIENT.FENCES) === 1) this.u8[valid] = 1;
      else Atomics.store(this.u8, valid, 1);
      ringBell(this.i32, base + CLIENT.SLEEPING, base + CLIENT.BELL);
      if (state === CLIENT_CLOSING && left <= 0) this.releaseWhenDrained(clientId, CLIENT_CLOSING);
    } else if (state === CLIENT_DEAD && left <= 0) {
      this.releaseWhenDrained(clientId, CLIENT_DEAD);
    }
  }

  /** Requests are waiting at the cursor (what wait() and waitSync() wait for). */
  ready(): boolean {
    return this.closed || Atomics.load(this.u8, H.RING + (this.cursor & this.ringMask) * this.layout.reqSlot) === 1;
  }

  /** Marks the server gone (clients' calls and waits fail with ServerDisconnected) and unlinks the segment. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    Atomics.store(this.u8, H.SERVER_ALIVE, 0);
    Atomics.store(this.i32, this.srv + SERVER.STATE, 0);
    // Wake every sleeper: they find the server gone.
    Atomics.add(this.i32, this.srv + SERVER.TAIL_BELL, 1);
    for (let c = 0; c < this.layout.maxClients; c++) {
      const base = this.clientBase(c);
      Atomics.add(this.i32, base + CLIENT.BELL, 1);
      ringBell(this.i32, base + CLIENT.SLEEPING, base + CLIENT.BELL);
    }
    ringBell(this.i32, this.srv + SERVER.TAIL_SLEEPING, this.srv + SERVER.TAIL_BELL);
    removeLayerSegment(this.name);
  }

  protected plan(what: string, options: WaitOptions): WaitPlan {
    return {
      oversubscribed: attachedClients(this.i32, this.layout) + 1 > availableParallelism(),
      call: { deadline: new Deadline(options.timeoutMs, options.signal), what: `delegationrpc server ${this.name}: ${what} for requests` },
      probe: () => {
        if (this.poll() === 0) this.checkHole();
        this.maybeReap();
      },
    };
  }

  private slotIndex(clientId: number, respSlot: number, what: string): number {
    if (!(clientId >>> 0 === clientId && clientId < this.layout.maxClients)) throw new WeftError('EINVAL', `delegationrpc server ${this.name}: ${what}: client id ${clientId} out of [0, ${this.layout.maxClients})`);
    if (!(respSlot >>> 0 === respSlot && respSlot < this.layout.respDepth)) throw new WeftError('EINVAL', `delegationrpc server ${this.name}: ${what}: response slot ${respSlot} out of [0, ${this.layout.respDepth})`);
    return clientId * this.layout.respDepth + respSlot;
  }

  private clientBase(c: number): number {
    return clientWord(this.layout, c);
  }

  private step(): void {
    const c = (this.cursor = (this.cursor + 1) | 0);
    if ((c & (TAIL_EPOCH - 1)) !== 0) return;
    if (c === 0) this.cursorHi = (this.cursorHi + 1) | 0;
    // Clients compare this count with the one they read with their cached tail (see
    // DelegationClient.begin): bumped before a tail past the boundary is published.
    Atomics.add(this.i32, this.srv + SERVER.TAIL_EPOCH, 1);
  }

  /** Whether the cursor sits on a hole (head is past it, its slot not committed): if so, onHole(). */
  private checkHole(): void {
    const p = this.cursor;
    if (Atomics.load(this.i32, HEAD_W) !== p && Atomics.load(this.u8, H.RING + (p & this.ringMask) * this.layout.reqSlot) !== 1) this.onHole();
    else this.holeActive = false;
  }

  /** The cursor sits on a hole: note since when, and examine it once it is old. */
  private onHole(): void {
    if (!this.holeActive || this.holePos !== this.cursor) {
      this.holeActive = true;
      this.holePos = this.cursor;
      this.holeSince = performance.now();
      return;
    }
    // A hole is normal for the nanoseconds between a client's fetch_add and its commit; the
    // callers look only every 256th empty poll, or between sleeps.
    const now = performance.now();
    if (now - this.holeSince < this.holeTimeoutMs) return;
    this.holeSince = now;
    // A client waiting for space behind the hole must see every slot the server freed, but not
    // the slots of requests the caller still holds (recv() without advanceTail() since): those
    // go with the caller's advanceTail(), skipped holes included.
    if (this.held === 0) this.publishTail();
    if (this.holeIsOwnedByLiveClient()) return;
    // Its owner may have committed between the check that found the hole and the phases read
    // just now (it stores committed, then the idle phase): look again before skipping. A
    // skipped slot committed late would be taken a lap later as a request nobody made.
    if (Atomics.load(this.u8, H.RING + (this.cursor & this.ringMask) * this.layout.reqSlot) === 1) {
      this.holeActive = false;
      return;
    }
    // Dead owner, a call abandoned on timeout, or nobody (a stray write to head): skip it, and
    // the run of such positions behind it up to head (abandoned calls, a head moved by a stray
    // write) in this pass, each only after the same two looks; a run waiting out the timeout
    // position by position would stall the ring for the run's length times the timeout.
    this.step();
    this.stats.holesSkipped++;
    this.holeActive = false;
    const u8 = this.u8;
    const slot = this.layout.reqSlot;
    for (let k = 1; k < this.layout.ringDepth; k++) {
      const p = this.cursor;
      if (Atomics.load(this.i32, HEAD_W) === p || Atomics.load(u8, H.RING + (p & this.ringMask) * slot) === 1) break;
      if (this.holeIsOwnedByLiveClient() || Atomics.load(u8, H.RING + (p & this.ringMask) * slot) === 1) break;
      this.step();
      this.stats.holesSkipped++;
    }
    if (this.held === 0) this.publishTail();
  }

  /**
   * Whether a live client may own the hole at the cursor: one in the middle of reserving (its
   * position not yet published), or one that published this position and has not committed
   * (a slow committer). Dead clients found on the way are detached.
   */
  private holeIsOwnedByLiveClient(): boolean {
    let live = false;
    for (let c = 0; c < this.layout.maxClients; c++) {
      const base = this.clientBase(c);
      const state = Atomics.load(this.i32, base + CLIENT.STATE);
      if (state !== CLIENT_ATTACHED && state !== CLIENT_CLOSING) continue;
      const phase = Atomics.load(this.i32, base + CLIENT.PHASE);
      const mayOwn = phase === PHASE_RESERVING || (phase === PHASE_RESERVED && Atomics.load(this.i32, base + CLIENT.RESERVED_POS) === this.cursor);
      if (!mayOwn) continue;
      // An id that changed hands meanwhile counts as live: the hole is looked at again later.
      if (this.reap(c, state) !== REAP_DEAD) live = true;
    }
    return live;
  }

  private maybeReap(): void {
    const now = performance.now();
    if (now - this.lastReap < this.reapIntervalMs) return;
    this.lastReap = now;
    for (let c = 0; c < this.layout.maxClients; c++) {
      const base = this.clientBase(c);
      const state = Atomics.load(this.i32, base + CLIENT.STATE);
      // CLAIMING too: a thread killed between its claim and ATTACHED (reapIfDead leaves one
      // whose owner words are not written yet alone).
      if ((state === CLIENT_ATTACHED || state === CLIENT_CLOSING || state === CLIENT_CLAIMING) && this.reap(c, state) !== REAP_ALIVE) continue;
      if ((state === CLIENT_DEAD || state === CLIENT_CLOSING) && this.outstanding[c] <= 0) this.releaseWhenDrained(c, state);
    }
  }

  /** Detaches client c (seen in state `from`) when its thread is gone; reapIfDead's outcome. */
  private reap(c: number, from: number): number {
    const got = reapIfDead(this.i32, this.clientBase(c), from);
    if (got !== REAP_DEAD) return got;
    this.stats.clientsReaped++;
    if (this.outstanding[c] <= 0) this.releaseWhenDrained(c, CLIENT_DEAD);
    return got;
  }

  /**
   * Frees a closing or dead client's id once nothing more can arrive for it: no request taken
   * and unanswered, and the cursor past every position it could have reserved. Those are
   * below the head read when the server first saw it go (it reserved them before closing or
   * dying). Answering only what was taken is not enough: a request still in the ring would be
   * answered into the slots of the id's next owner. Until then maybeReap looks again.
   */
  private releaseWhenDrained(c: number, from: number): void {
    if (this.fenced[c] === 0) {
      this.fence[c] = Atomics.load(this.i32, HEAD_W);
      this.fenced[c] = 1;
    }
    if (((this.cursor - this.fence[c]) | 0) >= 0) this.release(c, from);
  }

  /** Frees a client id for reuse once nothing more will be written to its slots. */
  private release(c: number, from: number): void {
    this.outstanding[c] = 0;
    this.owed.fill(0, c * this.layout.respDepth, (c + 1) * this.layout.respDepth);
    this.fenced[c] = 0;
    const l = this.layout;
    for (let s = 0; s < l.respDepth; s++) Atomics.store(this.u8, l.respArea + (c * l.respDepth + s) * l.respSlot + RESP.VALID, 0);
    // A thread that died asleep in a wait never took itself off the sleeper count: every
    // reply to the id's next owner would then pay a futex wake.
    if (from === CLIENT_DEAD) Atomics.store(this.i32, this.clientBase(c) + CLIENT.SLEEPING, 0);
    // Only the server moves an id out of CLOSING or DEAD: the owner words are its to clear.
    clearClientRecord(this.i32, this.clientBase(c));
    Atomics.compareExchange(this.i32, this.clientBase(c) + CLIENT.STATE, from, CLIENT_RELEASED);
  }
}

/**
 * One NIC device serves every layer of a process (the transport, copyrpc, later the transfer
 * engine), and its one completion queue is polled here: each completion goes to the owner of
 * its QP, found in O(1) by QP number. Owners never poll the CQ themselves, so what one of
 * them polls can never be lost to another.
 *
 * Waiting goes through the router too: `waitSync` / `waitAsync` wait for an owner's condition
 * (all of a collective step's operations settled, a copyrpc inbox not empty) with the one
 * waiting loop of host/wait.ts. Every async waiter of the process shares ONE progress loop:
 * it polls, hands completions out, settles the waiters whose condition holds, and sleeps on
 * the CQ's doorbell when nothing moves. Concurrent waiters never starve each other, and a
 * process never has two loops spinning on one CQ.
 *
 * @example
 * const router = new CompletionRouter(device);
 * router.attach(qp.qpn, { take: (b, i) => onCompletion(b, i) });
 * await router.waitAsync(() => done, { deadline: new Deadline(5000), what: 'rank 0: my op' });
 */
import { WeftError } from '../errors.js';
import { WAIT, turn, waitAsync, waitSync, type Doorbell, type WaitCall } from '../host/wait.js';
import { Deadline } from '../util/deadline.js';
import { CompletionBatch, type Device } from './types.js';

/** The owner of some QPs' completions. */
export interface CompletionSink {
  /** Entry `i` of `batch` belongs to one of this sink's QPs (valid during the call only). */
  take(batch: CompletionBatch, i: number): void;
  /** After each polled batch in which this sink took something (errors after messages, ...). */
  endBatch?(): void;
}

interface Waiter {
  ready: () => boolean;
  call: WaitCall;
  /** Waits for operations on `nearby` QPs only. */
  near: boolean;
  resolve(): void;
  reject(err: unknown): void;
}

/**
 * The shared loop looks at every async waiter about this often while nothing arrives.
 * (Before, a request() toward a host SIGKILLed under it waited out its own 60 s timeout: the
 * request driver's idle wait had no deadline, and its silent-peer check never ran.)
 */
const LOOK_MS = 250;

/** QP numbers are below this on both providers (layout MAX_QPS). */
const MAX_QPN = 1024;

export class CompletionRouter {
  private readonly byQpn: (CompletionSink | undefined)[] = new Array(MAX_QPN).fill(undefined);
  /** QPs attached per owner. */
  private readonly owners = new Map<CompletionSink, number>();
  /**
   * The owner of every attached QP when there is exactly one (copyrpc without a job): it may
   * read the CQ itself with pollAlone, without dispatch.
   */
  soleOwner: CompletionSink | undefined;
  /** Sinks that took something in the batch being dispatched (endBatch runs once each). */
  private readonly touched: CompletionSink[] = [];
  private nTouched = 0;
  private readonly batch = new CompletionBatch(256);
  /** Entries of `batch` read from the CQ, and the next one to hand out (see poll). */
  private filled = 0;
  private next = 0;
  private readonly waiters: Waiter[] = [];
  /** Async waiters not `near`: while there are none, the shared loop polls with pollNear. */
  private farWaiters = 0;
  private looping = false;
  /** Set by kick(): the loop's sleep ends and every waiter is checked again. */
  private kicked = false;
  private wake: (() => void) | undefined;
  /** performance.now() at which the loop's current sleep ends at the latest (its earliest waiter's deadline). */
  private loopUntil = 0;
  /** The sync wait's condition (a field, so waitSync allocates no closure). */
  private syncReady: () => boolean = () => true;

  private closed = false;

  constructor(readonly device: Device) {}

  /** Routes the completions of QP `qpn` to `sink`. */
  attach(qpn: number, sink: CompletionSink): void {
    if (!Number.isInteger(qpn) || qpn < 0 || qpn >= MAX_QPN) throw new WeftError('EINVAL', `${this.device.label}: QP number ${qpn} is outside [0, ${MAX_QPN})`);
    const had = this.byQpn[qpn];
    if (had === sink) return;
    if (had !== undefined) throw new WeftError('EINVAL', `${this.device.label}: QP ${qpn} already has an owner; detach it first`);
    this.byQpn[qpn] = sink;
    this.owners.set(sink, (this.owners.get(sink) ?? 0) + 1);
    this.soleOwner = this.owners.size === 1 ? sink : undefined;
  }

  /** Stops routing QP `qpn` (its late completions are dropped). */
  detach(qpn: number, sink: CompletionSink): void {
    if (this.byQpn[qpn] !== sink) return;
    this.byQpn[qpn] = undefined;
    const n = (this.owners.get(sink) ?? 1) - 1;
    if (n > 0) this.owners.set(sink, n);
    else this.owners.delete(sink);
    this.soleOwner = this.owners.size === 1 ? this.owners.keys().next().value : undefined;
  }

  /**
   * For the sole owner (soleOwner): polls the CQ into `batch` without dispatch and returns
   * how many entries it holds, all the owner's. Routing costs ~20 ns a completion, a fifth
   * of a copyrpc call's CPU on shm.
   */
  pollAlone(batch: CompletionBatch): number {
    if (this.closed) return 0;
    const n = this.device.cq.poll(batch);
    if (n > 0 && this.looping) this.kick();
    return n;
  }

  /** More processes of this job on this host than cores (the device knows). */
  get oversubscribed(): boolean {
    return this.device.oversubscribed;
  }

  /**
   * Polls the CQ until it is empty and hands each completion to its QP's owner; returns how
   * many were handed out. Wakes the shared loop: a waiter may be satisfied now. `near`: for a
   * waiter whose operations are all on `nearby` QPs (shared memory), the CQ's `pollNear` reads
   * an idle fabric only now and then (the same as a full poll on devices without it).
   */
  poll(near = false): number {
    // The device is closed: nothing more comes, and its CQ must not be touched.
    if (this.closed) return 0;
    const b = this.batch;
    // A sink's take() may poll again (a blocking call in a copyrpc response callback): that
    // inner poll first hands out the rest of the batch being dispatched, in order, and only
    // then reads the CQ into the same batch. Both loops go through `next` and `filled`, so no
    // entry is handed out twice or lost.
    let total = this.dispatchRest(b);
    const cq = this.device.cq;
    const pollNear = near ? cq.pollNear : undefined;
    for (;;) {
      const n = pollNear !== undefined ? pollNear.call(cq, b) : cq.poll(b);
      this.filled = n;
      this.next = 0;
      total += this.dispatchRest(b);
      if (n < b.capacity) break;
    }
    // Whoever polled (a sync wait, the board's probe, an owner's own poll), the shared loop
    // must look at its waiters again: their conditions may hold now.
    if (total > 0 && this.looping) this.kick();
    return total;
  }

  /** Hands the batch's entries from `next` on to their owners; returns how many. */
  private dispatchRest(b: CompletionBatch): number {
    const byQpn = this.byQpn;
    let k = 0;
    while (this.next < this.filled) {
      const i = this.next++;
      k++;
      const sink = byQpn[b.qpn[i]];
      if (sink === undefined) continue;
      sink.take(b, i);
      if (sink.endBatch !== undefined && this.touched.indexOf(sink, 0) < 0) this.touched[this.nTouched++] = sink;
    }
    if (this.nTouched > 0) this.endBatch();
    return k;
  }

  private endBatch(): void {
    const t = this.touched;
    const n = this.nTouched;
    this.nTouched = 0;
    for (let i = 0; i < n; i++) {
      const s = t[i];
      t[i] = undefined as unknown as CompletionSink;
      s.endBatch!();
    }
  }

  private readonly pollThenSyncReady = (): boolean => {
    this.poll(this.syncNear);
    return this.syncReady();
  };
  /** The sync wait's operations are all on `nearby` QPs. */
  private syncNear = false;

  /**
   * Blocks until `ready()` (checked after every poll): spin, yield, sleep on the CQ. Throws
   * the deadline's ETIMEDOUT / EABORTED, or what `ready` or `probe` throw. `near`: what the
   * caller waits for travels on `nearby` QPs only (see poll).
   */
  waitSync(ready: () => boolean, call: WaitCall, probe?: () => void, near = false): void {
    this.poll(near);
    if (ready()) return;
    const outer = this.syncReady;
    const outerNear = this.syncNear;
    this.syncReady = ready;
    this.syncNear = near;
    try {
      waitSync(this.pollThenSyncReady, this.device.cq.doorbell, { oversubscribed: this.oversubscribed, call, probe });
    } finally {
      this.syncReady = outer;
      this.syncNear = outerNear;
    }
  }

  /**
   * Resolves when `ready()` (checked after every poll of the shared loop); rejects with what
   * `ready` throws, or when `call`'s deadline passes or its signal aborts.
   */
  waitAsync(ready: () => boolean, call: WaitCall, near = false): Promise<void> {
    try {
      this.poll(near);
      if (ready()) return Promise.resolve();
    } catch (err) {
      return Promise.reject(err);
    }
    return new Promise<void>((resolve, reject) => {
      const w: Waiter = { ready, call, near, resolve, reject };
      if (!near) this.farWaiters++;
      const signal = call.deadline.signal;
      if (signal) {
        const onAbort = () => this.kick();
        signal.addEventListener('abort', onAbort, { once: true });
        const done = () => signal.removeEventListener('abort', onAbort);
        w.resolve = () => (done(), resolve());
        w.reject = (e) => (done(), reject(e));
      }
      this.waiters.push(w);
      if (!this.looping) void this.loop();
      // The loop sleeps until the earliest deadline it knew of: a nearer one must wake it, or
      // this wait would time out only when something else woke the loop (a 60 s waiter's sleep).
      else if (performance.now() + call.deadline.remaining() < this.loopUntil) this.kick();
    });
  }

  /** Something other than a completion changed (new work, an abort): check every waiter now. */
  kick(): void {
    this.kicked = true;
    const wake = this.wake;
    if (wake !== undefined) {
      this.wake = undefined;
      wake();
    }
  }

  /** Fails every async waiter with `err` (the device is going away). */
  failAll(err: unknown): void {
    this.farWaiters = 0;
    for (const w of this.waiters.splice(0)) w.reject(err);
    this.kick();
  }

  /**
   * Its owner is about to close the device: fails every async waiter with `err`, and polls
   * from now on find nothing. Without it, the shared loop, woken after the close, polled the
   * closed CQ and its error ended the process as an unhandled rejection.
   */
  close(err: unknown): void {
    this.closed = true;
    this.failAll(err);
  }

  /**
   * Between the loop's sleeps: every LOOK_MS, settles the waiters whose condition holds
   * although nothing arrived (a copyrpc engine's silent-peer check, toward a host that died
   * and sends nothing); the loop then goes round.
   */
  private lastLook = 0;
  private readonly look = (): void => {
    const now = performance.now();
    if (now - this.lastLook < LOOK_MS) return;
    this.lastLook = now;
    if (this.settle() > 0) this.kicked = true;
  };

  private readonly loopReady = (): boolean => this.loopPoll() > 0 || this.kicked;

  /** The shared loop's poll: pollNear while every async waiter is near. */
  private loopPoll(): number {
    return this.poll(this.farWaiters === 0);
  }

  /** The CQ's doorbell, also ended by kick(). */
  private readonly loopBell: Doorbell = {
    beforeSleep: () => this.device.cq.doorbell.beforeSleep?.(),
    sleepSync: (ms, ready) => this.device.cq.doorbell.sleepSync(ms, ready),
    sleepAsync: (ms, ready) => {
      if (this.kicked) return Promise.resolve();
      const kicked = new Promise<void>((r) => (this.wake = r));
      return Promise.race([this.device.cq.doorbell.sleepAsync(ms, ready), kicked]).finally(() => {
        this.wake = undefined;
      });
    },
  };

  /**
   * The shared progress loop of async waiters. While completions flow it polls and settles,
   * letting the settled waiters' code run (a microtask: their next operations get posted) and
   * the event loop turn at least every WAIT.turnEveryMs; when nothing comes, it waits on the
   * CQ (spin, yield, sleep) until a completion, a kick, or the earliest waiter's deadline.
   */
  private async loop(): Promise<void> {
    this.looping = true;
    try {
      let lastTurn = performance.now();
      while (this.waiters.length > 0) {
        const n = this.loopPoll();
        const settled = this.settle();
        if (this.waiters.length === 0) break;
        if (performance.now() - lastTurn > WAIT.turnEveryMs) {
          await turn();
          lastTurn = performance.now();
          continue;
        }
        if (settled > 0 || n > 0) {
          await Promise.resolve();
          continue;
        }
        this.kicked = false;
        try {
          await waitAsync(this.loopReady, this.loopBell, { oversubscribed: this.oversubscribed, call: this.loopCall(), probe: this.look });
        } catch (err) {
          if ((err as WeftError).code !== 'ETIMEDOUT') this.failAll(err);
        }
        lastTurn = performance.now();
      }
    } finally {
      this.looping = false;
      this.kicked = false;
    }
  }

  /** Until the earliest waiter's deadline: its timeout then fires on time. */
  private loopCall(): WaitCall {
    let ms = Infinity;
    for (const w of this.waiters) ms = Math.min(ms, w.call.deadline.remaining());
    this.loopUntil = performance.now() + ms;
    return { deadline: new Deadline(Math.max(0, ms)), what: `${this.device.label}: progress` };
  }

  /** Resolves or rejects every waiter that is done; returns how many. */
  private settle(): number {
    const ws = this.waiters;
    let n = 0;
    for (let i = 0; i < ws.length; i++) {
      const w = ws[i];
      let err: unknown;
      try {
        if (!w.ready()) {
          const { deadline } = w.call;
          if (!deadline.signal?.aborted && deadline.remaining() > 0) continue;
          // The deadline passed since ready() looked: ask once more, then end it with the
          // owner's own error (it names what it waited for, and a stopped peer).
          if (!w.ready()) {
            if (w.call.expired !== undefined) throw w.call.expired();
            deadline.check(w.call.what);
          }
        }
      } catch (e) {
        err = e ?? new WeftError('ETRANSPORT', `${w.call.what}: failed`);
      }
      // A ready() that failed every waiter (failAll) emptied the list: w is settled already.
      if (ws[i] !== w) continue;
      ws.splice(i--, 1);
      if (!w.near) this.farWaiters--;
      n++;
      if (err !== undefined) w.reject(err);
      else w.resolve();
    }
    return n;
  }
}

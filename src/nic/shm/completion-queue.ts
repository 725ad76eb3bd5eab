/**
 * The shm completion queue: local completions first, then the multi-producer ring in this
 * device's control segment, where peers reserve a slot with fetch-add and commit it by
 * storing `position + 1` into its sequence word. Waits go through the one waiting loop
 * (host/wait.ts); its doorbell here is a futex on the control segment that peers ring only
 * while the SLEEPING count is nonzero.
 */
import { native } from '../../native/binding.js';
import { loadAcquire } from '../../host/acquire.js';
import { waitForCompletions, waitForCompletionsSync, type Doorbell } from '../../host/wait.js';
import type { WaitOptions } from '../../util/deadline.js';
import { CompletionBatch, Opcode, Status, type CompletionQueue } from '../types.js';
import type { ShmDevice } from './device.js';
import * as L from './layout.js';

/** A reserved-but-uncommitted slot is skipped after this long, once a peer has died. */
const HOLE_MS = 200;

export class ShmCompletionQueue implements CompletionQueue {
  private head = 0;
  private ticks = 0;
  private holeSince = 0;
  private readonly mask: number;

  constructor(private readonly dev: ShmDevice) {
    this.mask = dev.cqDepth - 1;
  }

  poll(out: CompletionBatch, max = out.capacity): number {
    const dev = this.dev;
    if (max > out.capacity) max = out.capacity;
    if ((++this.ticks & 63) === 0) dev.progress(performance.now());
    let n = dev.local.size > 0 ? dev.local.drain(out, 0, max) : 0;
    const c = dev.ctl;
    let head = this.head;
    const start = head;
    while (n < max) {
      const b = L.CQ_RING + ((head & this.mask) << 2);
      // The first entry of a poll is read with Atomics, so that a loop of polls always makes
      // a synchronizing load; the later ones need acquire order only (host/acquire.ts).
      if ((head === start ? Atomics.load(c, b) : loadAcquire(c, b)) !== ((head + 1) | 0)) break;
      const qpn = c[b + 1] >>> 0;
      const imm = c[b + 2] >>> 0;
      const len = c[b + 3] >>> 0;
      head = (head + 1) | 0;
      dev.outstanding--;
      const qp = qpn < L.MAX_QPS ? dev.qps[qpn] : undefined;
      // A completion for a QP closed since (or a malformed qpn) is dropped with its credit.
      if (qp === undefined) continue;
      out.qpn[n] = qpn;
      out.opcode[n] = Opcode.RECV_WRITE_IMM;
      out.status[n] = Status.SUCCESS;
      out.imm[n] = imm;
      out.byteLength[n] = len;
      out.wrId[n] = 0;
      out.errors[n] = undefined;
      n++;
      if (qp.autoRepost) dev.deferGrant(qpn);
    }
    if (head !== start) {
      this.head = head;
      if (dev.deferredCount > 0) dev.flushGrants(false);
    }
    if (n < max && dev.local.size > 0) n += dev.local.drain(out, n, max - n);
    out.count = n;
    return n;
  }

  /**
   * A producer killed between reserving a slot and committing it would block the ring for
   * every other peer. Once a peer death was seen, a slot stuck that way for HOLE_MS is
   * skipped (its credit was the dead producer's). Called from the slow paths only: reading
   * the tail word on every poll would bounce its cache line between producers and consumer.
   */
  skipDeadHole(now: number): void {
    const c = this.dev.ctl;
    const head = this.head;
    const committed = Atomics.load(c, L.CQ_RING + ((head & this.mask) << 2)) === ((head + 1) | 0);
    if (committed || Atomics.load(c, L.CQ_TAIL) === head || this.dev.lastPeerDeath === 0) {
      this.holeSince = 0;
      return;
    }
    if (this.holeSince === 0) this.holeSince = now;
    else if (now - this.holeSince >= HOLE_MS && now - this.dev.lastPeerDeath < 60_000) {
      this.head = (head + 1) | 0;
      this.dev.outstanding--;
      this.holeSince = 0;
    }
  }

  /** True when poll would return something (after moving queued work forward). */
  ready(): boolean {
    const dev = this.dev;
    if (dev.local.size > 0) return true;
    if (Atomics.load(dev.ctl, L.CQ_RING + ((this.head & this.mask) << 2)) === ((this.head + 1) | 0)) return true;
    dev.progress(performance.now());
    return dev.local.size > 0;
  }

  /** The futex peers ring after committing a completion, while someone sleeps on it. */
  readonly doorbell: Doorbell = {
    beforeSleep: () => this.dev.flushGrants(true),
    sleepSync: (ms, ready) => this.sleepSync(ms, ready),
    sleepAsync: async (ms, ready) => {
      this.dev.progress(performance.now());
      const c = this.dev.ctl;
      Atomics.add(c, L.SLEEPING, 1);
      try {
        const bell = Atomics.load(c, L.DOORBELL);
        if (!ready()) await native.futexWaitAsync(c, L.DOORBELL, bell, ms);
      } finally {
        Atomics.sub(c, L.SLEEPING, 1);
      }
    },
  };

  /**
   * One blocking sleep on the doorbell: at most `ms`, unless `ready()` (checked once the sleep
   * is announced) says there is no need or a peer rings. `arm`, when given, runs after the
   * doorbell's value is read and before `ready()`: another source may then ring the same word
   * (a mixed device's fabric relay) without a ring being lost; it returns the longest sleep
   * that is safe, `ms` when that source will ring.
   */
  sleepSync(ms: number, ready: () => boolean, arm?: () => number): void {
    // Polls check peers' liveness only every 64th time (hot path): a sleeper does it per slice.
    this.dev.progress(performance.now());
    const c = this.dev.ctl;
    Atomics.add(c, L.SLEEPING, 1);
    const bell = Atomics.load(c, L.DOORBELL);
    const longest = arm ? arm() : ms;
    if (!ready()) native.futexWait(c, L.DOORBELL, bell, Math.min(ms, longest));
    Atomics.sub(c, L.SLEEPING, 1);
  }

  private readonly isReady = () => this.ready();

  wait(options: WaitOptions = {}): Promise<void> {
    return waitForCompletions(this.isReady, this.doorbell, this.dev.oversubscribed, this.dev.label, options);
  }

  waitSync(options: WaitOptions = {}): void {
    waitForCompletionsSync(this.isReady, this.doorbell, this.dev.oversubscribed, this.dev.label, options);
  }
}

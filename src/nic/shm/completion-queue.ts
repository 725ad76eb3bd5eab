/**
 * The shm completion queue: local completions first, then the multi-producer ring in this
 * device's control segment, where peers reserve a slot with fetch-add and commit it by
 * storing `position + 1` into its sequence word. Waiting spins, then yields the core, then
 * sleeps on the doorbell futex (peers ring it only while the SLEEPING count is nonzero).
 */
import { native } from '../../native/binding.js';
import { WeftError } from '../../errors.js';
import { Deadline, type WaitOptions } from '../../util/deadline.js';
import { CompletionBatch, Opcode, Status, type CompletionQueue } from '../types.js';
import type { ShmDevice } from './device.js';
import * as L from './layout.js';

/** Busy-poll this long before yielding (covers a round trip between spinning peers). */
const SPIN_US = 50;
/** Then yield the core this long before sleeping (lets oversubscribed ranks run). */
const YIELD_US = 2000;
/**
 * With more processes than cores, yield this long: a yield hands the core straight to the
 * runnable peer, while a futex wake-up costs tens of microseconds or a scheduler tick.
 */
const OVERSUBSCRIBED_YIELD_US = 20_000;
/** Sleep in slices this long, checking peers' liveness between slices. */
const SLEEP_SLICE_MS = 50;

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
      if (Atomics.load(c, b) !== ((head + 1) | 0)) break;
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
      if (dev.autoRepost) dev.deferGrant(qpn);
    }
    if (head !== start) {
      this.head = head;
      if (dev.autoRepost) dev.flushGrants(false);
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

  async wait(options: WaitOptions = {}): Promise<void> {
    if (this.ready()) return;
    const what = `${this.dev.label}: wait for completions`;
    const deadline = new Deadline(options.timeoutMs, options.signal);
    if (this.spin()) return;
    const yieldUntil = performance.now() + (this.dev.oversubscribed ? OVERSUBSCRIBED_YIELD_US : YIELD_US) / 1000;
    while (performance.now() < yieldUntil) {
      await new Promise<void>((r) => setImmediate(r));
      if (this.ready()) return;
      native.yieldThread();
      if (this.ready()) return;
      deadline.check(what);
    }
    const c = this.dev.ctl;
    this.dev.flushGrants(true);
    const aborted = abortPromise(options.signal);
    let asleep = false;
    try {
      for (;;) {
        deadline.check(what);
        Atomics.add(c, L.SLEEPING, 1);
        asleep = true;
        const bell = Atomics.load(c, L.DOORBELL);
        if (!this.ready()) {
          const slice = Math.max(1, Math.min(deadline.remaining(), SLEEP_SLICE_MS));
          const sleep = native.futexWaitAsync(c, L.DOORBELL, bell, slice);
          await (aborted ? Promise.race([sleep, aborted.promise]) : sleep);
        }
        Atomics.sub(c, L.SLEEPING, 1);
        asleep = false;
        if (this.ready()) return;
      }
    } finally {
      if (asleep) Atomics.sub(c, L.SLEEPING, 1);
      aborted?.dispose();
    }
  }

  waitSync(options: WaitOptions = {}): void {
    if (this.ready()) return;
    const what = `${this.dev.label}: waitSync for completions`;
    const deadline = new Deadline(options.timeoutMs, options.signal);
    if (this.spin()) return;
    const yieldUntil = performance.now() + (this.dev.oversubscribed ? OVERSUBSCRIBED_YIELD_US : YIELD_US) / 1000;
    while (performance.now() < yieldUntil) {
      native.yieldThread();
      if (this.ready()) return;
    }
    const c = this.dev.ctl;
    this.dev.flushGrants(true);
    for (;;) {
      deadline.check(what);
      Atomics.add(c, L.SLEEPING, 1);
      const bell = Atomics.load(c, L.DOORBELL);
      if (!this.ready()) native.futexWait(c, L.DOORBELL, bell, Math.max(1, Math.min(deadline.remaining(), SLEEP_SLICE_MS)));
      Atomics.sub(c, L.SLEEPING, 1);
      if (this.ready()) return;
    }
  }

  private spin(): boolean {
    // Oversubscribed (more ranks than cores), the peer we wait for may need this core: a short
    // spin, then the yield phase hands the core over.
    const until = performance.now() + (this.dev.oversubscribed ? SPIN_US / 10 : SPIN_US) / 1000;
    for (let i = 1; ; i++) {
      if (this.ready()) return true;
      if ((i & 63) === 0 && performance.now() > until) return false;
    }
  }
}

/** A promise that rejects when `signal` aborts, with a way to drop the listener. */
function abortPromise(signal: AbortSignal | undefined): { promise: Promise<never>; dispose(): void } | undefined {
  if (!signal) return undefined;
  let onAbort: () => void = () => {};
  const promise = new Promise<never>((_, reject) => {
    onAbort = () => reject(new WeftError('EABORTED', 'wait for completions: aborted by the caller\'s AbortSignal', { cause: signal.reason }));
    signal.addEventListener('abort', onAbort, { once: true });
  });
  promise.catch(() => {});
  return { promise, dispose: () => signal.removeEventListener('abort', onAbort) };
}

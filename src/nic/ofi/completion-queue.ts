/**
 * The ofi completion queue: one native poll per call reads fabric completions into a bound
 * Uint32Array; this file turns them into CompletionBatch entries without allocating.
 * Incoming WRITE_IMMs are reported directly (the target QP and length travel in the high
 * word of the remote CQ data, see layout.ts); local completions go through their QP's
 * in-flight ring, which reports them in post order via the device's LocalCompletions.
 * Waiting spins, then yields, then sleeps on the CQ's wait fd on the libuv loop (tcp) or in
 * short slices (shm has no fd), waking at least every 100 ms to check peers and timeouts.
 */
import { WeftError } from '../../errors.js';
import { native } from '../../native/binding.js';
import { Deadline, type WaitOptions } from '../../util/deadline.js';
import { CompletionBatch, Opcode, Status, type CompletionQueue } from '../types.js';
import type { OfiDevice } from './device.js';
import * as L from './layout.js';

const SPIN_US = 50;
const YIELD_US = 2000;
/**
 * With more processes than cores, poll between yields this long before sleeping: a yield hands
 * the core straight to a rank that needs it, a sleep costs a wake-up through the scheduler.
 */
const OVERSUBSCRIBED_YIELD_US = 20_000;
const SLEEP_SLICE_MS = 100;

export class OfiCompletionQueue implements CompletionQueue {
  /** Entries taken by ready() and not yet handed to a caller. */
  private readonly held = new CompletionBatch(256);
  private heldStart = 0;

  constructor(private readonly dev: OfiDevice) {}

  poll(out: CompletionBatch, max = out.capacity): number {
    if (max > out.capacity) max = out.capacity;
    let n = 0;
    if (this.heldStart < this.held.count) n = this.takeHeld(out, max);
    if (n < max) n += this.pollInto(out, n, max - n);
    out.count = n;
    return n;
  }

  /** Progress plus one native poll; writes at most `max` entries at `at`. */
  private pollInto(out: CompletionBatch, at: number, max: number): number {
    const dev = this.dev;
    dev.flush();
    let n = 0;
    const k = dev.ep.poll(Math.min(max, dev.outCapacity));
    if (k > 0) n = this.translate(k, out, at);
    dev.progress(performance.now());
    if (n < max && dev.local.size > 0) n += dev.local.drain(out, at + n, max - n);
    return n;
  }

  private translate(k: number, out: CompletionBatch, at: number): number {
    const dev = this.dev;
    const w = dev.outWords;
    const qps = dev.qps;
    let n = 0;
    for (let e = 0; e < k; e++) {
      const b = e * L.OUT_WORDS;
      const kind = w[b + L.OUT_KIND];
      if (kind === L.KIND_REMOTE_WRITE) {
        let qpn: number;
        let lenField: number;
        if (dev.cqDataSize >= 8) {
          const hi = w[b + L.OUT_DATA + 1];
          qpn = hi & 0x3ff;
          lenField = hi >>> 10;
        } else {
          qpn = dev.qpnOfSource(w[b + L.OUT_SRC]);
          lenField = w[b + L.OUT_LEN];
        }
        const qp = qps[qpn];
        // A write for a QP closed since (or a stray one) is dropped. One for a QP not connected
        // yet is delivered: the peer connected first and wrote at once (an RDMA NIC delivers it
        // too; with 4-byte CQ data the source is unknown until connect and it cannot be).
        if (qp === undefined || (qp.state !== 'ready' && qp.state !== 'init')) continue;
        const o = at + n++;
        out.qpn[o] = qpn;
        out.opcode[o] = Opcode.RECV_WRITE_IMM;
        out.status[o] = Status.SUCCESS;
        out.imm[o] = w[b + L.OUT_DATA];
        out.byteLength[o] = qp.onArrival(lenField, dev.autoRepost);
        out.wrId[o] = 0;
        out.errors[o] = undefined;
        continue;
      }
      if (kind !== L.KIND_LOCAL && kind !== L.KIND_ERROR) continue;
      const hi = w[b + L.OUT_CTX + 1];
      const qp = qps[hi & 0x3ff];
      if (qp === undefined || (qp.gen & 0xfffff) !== hi >>> 12) continue;
      const ok = kind === L.KIND_LOCAL;
      const text = ok ? '' : dev.ep.errorText(w[b + L.OUT_AUX]);
      switch ((hi >>> 10) & 3) {
        case L.CTX_USER:
          qp.onComplete(w[b + L.OUT_CTX] | 0, ok, text);
          break;
        case L.CTX_VERIFY:
          qp.onVerify(ok, text);
          break;
        default:
          if (!ok) qp.fail(Status.TRANSPORT, `a credit update toward ${qp.peerLabel} failed in the fabric: ${text}`);
      }
    }
    return n;
  }

  private takeHeld(out: CompletionBatch, max: number): number {
    const h = this.held;
    let n = 0;
    while (this.heldStart < h.count && n < max) {
      const i = this.heldStart++;
      out.qpn[n] = h.qpn[i];
      out.opcode[n] = h.opcode[i];
      out.status[n] = h.status[i];
      out.imm[n] = h.imm[i];
      out.byteLength[n] = h.byteLength[i];
      out.wrId[n] = h.wrId[i];
      out.errors[n] = h.errors[i];
      h.errors[i] = undefined;
      n++;
    }
    return n;
  }

  /** True when poll would return something (moves work forward; may hold entries). */
  ready(): boolean {
    if (this.heldStart < this.held.count) return true;
    this.heldStart = 0;
    this.held.count = this.pollInto(this.held, 0, this.held.capacity);
    return this.held.count > 0;
  }

  async wait(options: WaitOptions = {}): Promise<void> {
    const dev = this.dev;
    const what = `${dev.label}: wait for completions`;
    if (this.ready()) return;
    const deadline = new Deadline(options.timeoutMs, options.signal);
    if (this.spin()) return;
    const yieldUntil = performance.now() + (dev.oversubscribed ? OVERSUBSCRIBED_YIELD_US : YIELD_US) / 1000;
    while (performance.now() < yieldUntil) {
      await new Promise<void>((r) => setImmediate(r));
      if (this.ready()) return;
      if (dev.oversubscribed) {
        native.yieldThread();
        if (this.ready()) return;
      }
      deadline.check(what);
    }
    dev.publishAll();
    const aborted = abortPromise(options.signal, what);
    try {
      for (;;) {
        deadline.check(what);
        const slice = Math.max(1, Math.min(deadline.remaining(), SLEEP_SLICE_MS));
        const sleep = dev.sleepAsync(slice);
        await (aborted ? Promise.race([sleep, aborted.promise]) : sleep);
        if (this.ready()) return;
      }
    } finally {
      aborted?.dispose();
    }
  }

  waitSync(options: WaitOptions = {}): void {
    const what = `${this.dev.label}: waitSync for completions`;
    if (this.ready()) return;
    const deadline = new Deadline(options.timeoutMs, options.signal);
    if (this.spin()) return;
    if (this.dev.oversubscribed) {
      const yieldUntil = performance.now() + OVERSUBSCRIBED_YIELD_US / 1000;
      while (performance.now() < yieldUntil) {
        native.yieldThread();
        if (this.ready()) return;
      }
      deadline.check(what);
    }
    this.dev.publishAll();
    for (;;) {
      deadline.check(what);
      this.dev.ep.waitSync(Math.max(1, Math.min(deadline.remaining(), SLEEP_SLICE_MS)));
      if (this.ready()) return;
    }
  }

  private spin(): boolean {
    const until = performance.now() + (this.dev.oversubscribed ? SPIN_US / 10 : SPIN_US) / 1000;
    for (let i = 1; ; i++) {
      if (this.ready()) return true;
      if ((i & 15) === 0 && performance.now() > until) return false;
    }
  }
}

function abortPromise(signal: AbortSignal | undefined, what: string): { promise: Promise<never>; dispose(): void } | undefined {
  if (!signal) return undefined;
  let onAbort: () => void = () => {};
  const promise = new Promise<never>((_, reject) => {
    onAbort = () => reject(new WeftError('EABORTED', `${what}: aborted by the caller's AbortSignal`, { cause: signal.reason }));
    signal.addEventListener('abort', onAbort, { once: true });
  });
  promise.catch(() => {});
  return { promise, dispose: () => signal.removeEventListener('abort', onAbort) };
}

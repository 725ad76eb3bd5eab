/**
 * The ofi completion queue: one native poll per call reads fabric completions into a bound
 * Uint32Array; this file turns them into CompletionBatch entries without allocating.
 * Incoming WRITE_IMMs are reported directly (the target QP and length travel in the high
 * word of the remote CQ data, see layout.ts); local completions go through their QP's
 * in-flight ring, which reports them in post order via the device's LocalCompletions.
 * Waits go through the one waiting loop (host/wait.ts); its doorbell here is the CQ's wait fd
 * (on the libuv loop for async waits) or, for providers without one (shm), a short timer.
 */
import { waitForCompletions, waitForCompletionsSync, type Doorbell } from '../../host/wait.js';
import type { WaitOptions } from '../../util/deadline.js';
import { CompletionBatch, Opcode, Status, type CompletionQueue } from '../types.js';
import type { OfiDevice } from './device.js';
import * as L from './layout.js';

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
    dev.submit();
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
        out.byteLength[o] = qp.onArrival(lenField);
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
          qp.onComplete(w[b + L.OUT_CTX] | 0, ok, text, ok ? 0 : w[b + L.OUT_DATA]);
          break;
        case L.CTX_VERIFY:
          qp.onVerify(ok, text);
          break;
        default:
          qp.onGrant(ok, text);
      }
    }
    return n;
  }

  private takeHeld(out: CompletionBatch, max: number): number {
    const h = this.held;
    let n = 0;
    while (this.heldStart < h.count && n < max) {
      const i = this.heldStart++;
      out.copyEntry(n, h, i);
      h.errors[i] = undefined;
      n++;
    }
    return n;
  }

  /** Entries taken by ready() wait for the next poll. */
  get holding(): boolean {
    return this.heldStart < this.held.count;
  }

  /** True when poll would return something (moves work forward; may hold entries). */
  ready(): boolean {
    if (this.heldStart < this.held.count) return true;
    this.heldStart = 0;
    this.held.count = this.pollInto(this.held, 0, this.held.capacity);
    return this.held.count > 0;
  }

  /** libfabric's CQ wait fd (fi_trywait first, in the native wait), or a timer without one. */
  readonly doorbell: Doorbell = {
    beforeSleep: () => this.dev.publishAll(),
    sleepSync: (ms) => void this.dev.ep.waitSync(ms),
    sleepAsync: (ms) => this.dev.sleepAsync(ms),
    mayBlock: () => this.dev.ep.mayBlock(),
  };

  private readonly isReady = () => this.ready();

  wait(options: WaitOptions = {}): Promise<void> {
    return waitForCompletions(this.isReady, this.doorbell, this.dev.oversubscribed, this.dev.label, options);
  }

  waitSync(options: WaitOptions = {}): void {
    waitForCompletionsSync(this.isReady, this.doorbell, this.dev.oversubscribed, this.dev.label, options);
  }
}

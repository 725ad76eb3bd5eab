/**
 * UnboundBuffer (Gloo's transport::UnboundBuffer): a typed array that can be sent to, or
 * received from, any rank under a slot, with no prior binding. Receives match sends by
 * (source, slot) in order; a receive may name several sources and takes the first message.
 *
 * Memory: on both providers the bytes are staged through the per-pair rings (on shm the
 * sender copies straight into the receiver's ring, the receiver copies out), so any typed
 * array works and nothing is registered per call.
 */
import { WeftError } from '../errors.js';
import { Deadline, type WaitOptions } from '../util/deadline.js';
import type { Device } from './device.js';
import { bytesOf } from './bytes.js';
import { RecvOp, SendOp, type TransportOp } from './ops.js';

/**
 * @example
 * const buf = new UnboundBuffer(ctx.transport, new Float32Array(1024));
 * if (ctx.rank === 0) { buf.send(1, 7); await buf.waitSend(); }
 * else { buf.recv(0, 7); const from = await buf.waitRecv(); }
 */
export class UnboundBuffer {
  readonly bytes: Uint8Array;
  private readonly sends: SendOp[] = [];
  private readonly recvs: RecvOp[] = [];
  private sendAbort = new AbortController();
  private recvAbort = new AbortController();

  constructor(
    readonly device: Device,
    readonly view: ArrayBufferView,
  ) {
    this.bytes = bytesOf(view, 'UnboundBuffer');
  }

  private range(what: string, offset: number, nbytes: number | undefined): Uint8Array {
    const n = nbytes ?? this.bytes.byteLength - offset;
    if (!Number.isInteger(offset) || offset < 0 || !Number.isInteger(n) || n < 0 || offset + n > this.bytes.byteLength) {
      throw new WeftError('EINVAL', `${this.device.label}: UnboundBuffer.${what}: byte range [${offset}, ${offset}+${n}) is outside the ${this.bytes.byteLength}-byte buffer`);
    }
    return this.bytes.subarray(offset, offset + n);
  }

  private checkRank(what: string, r: number): void {
    if (!Number.isInteger(r) || r < 0 || r >= this.device.size || r === this.device.rank) {
      throw new WeftError('EINVAL', `${this.device.label}: UnboundBuffer.${what}: rank ${r} is not a peer (world size ${this.device.size}, this is rank ${this.device.rank})`);
    }
  }

  private checkSlot(what: string, slot: number): void {
    if (!Number.isSafeInteger(slot) || slot < 0) throw new WeftError('EINVAL', `${this.device.label}: UnboundBuffer.${what}: slot must be a non-negative integer, got ${slot}`);
  }

  /** Sends bytes [offset, offset+nbytes) to rank `dst` under `slot`. */
  send(dst: number, slot: number, offset = 0, nbytes?: number): void {
    this.checkRank('send', dst);
    this.checkSlot('send', slot);
    this.device.checkUsable(`UnboundBuffer.send to rank ${dst}`);
    const op = new SendOp(dst, slot, this.range('send', offset, nbytes), 0, 0, 0);
    this.sends.push(op);
    this.device.pair(dst).send(op);
  }

  /** Receives the next message of `slot` from `src` (or the first of several sources) into [offset, offset+nbytes). */
  recv(src: number | readonly number[], slot: number, offset = 0, nbytes?: number): void {
    const srcs = typeof src === 'number' ? [src] : [...src];
    if (srcs.length === 0) throw new WeftError('EINVAL', `${this.device.label}: UnboundBuffer.recv: no source ranks given`);
    for (const s of srcs) this.checkRank('recv', s);
    this.checkSlot('recv', slot);
    this.device.checkUsable('UnboundBuffer.recv');
    const dst = this.range('recv', offset, nbytes);
    const op = new RecvOp(srcs, slot, dst, -1, 0, undefined);
    this.recvs.push(op);
    for (const s of srcs) {
      this.device.pair(s).post(op);
      if (op.matched || op.settled) break;
    }
  }

  /** Waits for the oldest pending send; resolves to its destination rank. */
  waitSend(options: WaitOptions = {}): Promise<number> {
    return this.waitOne(this.sends, 'send', options, this.sendAbort);
  }

  /** Waits for the oldest pending receive; resolves to the rank the message came from. */
  waitRecv(options: WaitOptions = {}): Promise<number> {
    return this.waitOne(this.recvs, 'recv', options, this.recvAbort);
  }

  /** Blocking variants (busy-poll, then sleep). */
  waitSendSync(options: WaitOptions = {}): number {
    return this.waitOneSync(this.sends, 'send', options);
  }
  waitRecvSync(options: WaitOptions = {}): number {
    return this.waitOneSync(this.recvs, 'recv', options);
  }

  /** Makes a pending waitSend reject with EABORTED (the send itself stays queued). */
  abortWaitSend(): void {
    this.sendAbort.abort(new WeftError('EABORTED', 'abortWaitSend'));
    this.sendAbort = new AbortController();
  }

  /** Makes a pending waitRecv reject with EABORTED and withdraws the unmatched receive. */
  abortWaitRecv(): void {
    this.recvAbort.abort(new WeftError('EABORTED', 'abortWaitRecv'));
    this.recvAbort = new AbortController();
  }

  private async waitOne(list: TransportOp[], kind: 'send' | 'recv', options: WaitOptions, ctl: AbortController): Promise<number> {
    const op = list[0];
    if (!op) throw new WeftError('EINVAL', `${this.device.label}: UnboundBuffer.wait${kind === 'send' ? 'Send' : 'Recv'} without a pending ${kind}`);
    const signal = options.signal ? AbortSignal.any([options.signal, ctl.signal]) : ctl.signal;
    const deadline = new Deadline(options.timeoutMs, signal);
    try {
      await this.device.waitAsync([op], deadline, `${this.device.label}: UnboundBuffer.wait${kind === 'send' ? 'Send' : 'Recv'}`);
    } catch (err) {
      this.giveUp(op, kind);
      throw err;
    }
    list.shift();
    return op.peer;
  }

  private waitOneSync(list: TransportOp[], kind: 'send' | 'recv', options: WaitOptions): number {
    const op = list[0];
    if (!op) throw new WeftError('EINVAL', `${this.device.label}: UnboundBuffer.wait${kind === 'send' ? 'Send' : 'Recv'}Sync without a pending ${kind}`);
    try {
      this.device.waitSync([op], new Deadline(options.timeoutMs, options.signal), `${this.device.label}: UnboundBuffer.wait${kind === 'send' ? 'Send' : 'Recv'}Sync`);
    } catch (err) {
      this.giveUp(op, kind);
      throw err;
    }
    list.shift();
    return op.peer;
  }

  /** A receive nobody waits for any more must not swallow a later message. */
  private giveUp(op: TransportOp, kind: 'send' | 'recv'): void {
    if (kind !== 'recv' || op.settled) return;
    const r = op as RecvOp;
    if (r.matched) return; // bytes are arriving: a later wait can still pick it up
    for (const s of r.srcs) this.device.pairs[s]?.unpost(r);
    this.recvs.splice(this.recvs.indexOf(r), 1);
  }
}

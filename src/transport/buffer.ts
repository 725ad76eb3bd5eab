/**
 * Bound buffers (Gloo's transport::Buffer): a typed array tied to one pair and one slot.
 * A send buffer's `send(offset, length, remoteOffset)` lands its bytes at `remoteOffset` in the
 * peer's receive buffer of the same slot; `waitRecv` there returns once per message. Messages
 * that arrive before the receive buffer exists are held and delivered when it is created.
 */
import { WeftError } from '../errors.js';
import { Deadline, type WaitOptions } from '../util/deadline.js';
import type { Device } from './device.js';
import { FLAG_BOUND } from './layout.js';
import { bytesOf } from './bytes.js';
import { CountOp, RecvOp, SendOp } from './ops.js';
import { signature } from './signature.js';

const BOUND_SIG = signature('bound');

/**
 * @example
 * const out = createSendBuffer(ctx.transport, 1, 3, data);
 * out.send(0, data.byteLength, 0);
 * await out.waitSend();
 */
export class SendBuffer {
  readonly bytes: Uint8Array;
  private readonly pending: SendOp[] = [];
  constructor(
    readonly device: Device,
    readonly peer: number,
    readonly slot: number,
    view: ArrayBufferView,
  ) {
    this.bytes = bytesOf(view, 'bound buffer');
    device.pair(peer);
  }

  /** Sends bytes [offset, offset+length) to land at `remoteOffset` in the peer's buffer. */
  send(offset = 0, length = this.bytes.byteLength - offset, remoteOffset = 0): void {
    if (!Number.isInteger(offset) || !Number.isInteger(length) || offset < 0 || length < 0 || offset + length > this.bytes.byteLength || !Number.isInteger(remoteOffset) || remoteOffset < 0) {
      throw new WeftError('EINVAL', `${this.device.label}: SendBuffer.send(${offset}, ${length}, ${remoteOffset}) toward rank ${this.peer}: range outside the ${this.bytes.byteLength}-byte buffer`);
    }
    this.device.checkUsable(`SendBuffer.send to rank ${this.peer}`);
    const op = new SendOp(this.peer, this.slot, this.bytes.subarray(offset, offset + length), BOUND_SIG, FLAG_BOUND, remoteOffset);
    this.pending.push(op);
    this.device.pair(this.peer).send(op);
  }

  /** Waits until the oldest pending send left this buffer (it may be reused). */
  async waitSend(options: WaitOptions = {}): Promise<void> {
    await this.device.waitAsync([this.oldest('waitSend')], new Deadline(options.timeoutMs, options.signal), this.what('waitSend'));
    this.pending.shift();
  }

  waitSendSync(options: WaitOptions = {}): void {
    this.device.waitSync([this.oldest('waitSendSync')], new Deadline(options.timeoutMs, options.signal), this.what('waitSendSync'));
    this.pending.shift();
  }

  private oldest(call: string): SendOp {
    const op = this.pending[0];
    if (!op) throw new WeftError('EINVAL', `${this.device.label}: SendBuffer.${call} toward rank ${this.peer} without a pending send`);
    return op;
  }

  private what(call: string): string {
    return `${this.device.label}: SendBuffer.${call} (rank ${this.peer}, slot ${this.slot})`;
  }
}

/** The receiving end of a bound slot; see SendBuffer. */
export class RecvBuffer {
  readonly bytes: Uint8Array;
  private readonly sink: RecvOp;
  private consumed = 0;
  constructor(
    readonly device: Device,
    readonly peer: number,
    readonly slot: number,
    view: ArrayBufferView,
  ) {
    this.bytes = bytesOf(view, 'bound buffer');
    this.sink = new RecvOp([peer], slot, this.bytes, -1, BOUND_SIG, undefined, true);
    device.pair(peer).post(this.sink);
  }

  /** Waits for the next message into this buffer. */
  async waitRecv(options: WaitOptions = {}): Promise<void> {
    const op = new CountOp(this.sink, this.consumed + 1);
    await this.device.waitAsync([op], new Deadline(options.timeoutMs, options.signal), `${this.device.label}: RecvBuffer.waitRecv (rank ${this.peer}, slot ${this.slot})`);
    this.consumed++;
  }

  waitRecvSync(options: WaitOptions = {}): void {
    const op = new CountOp(this.sink, this.consumed + 1);
    this.device.waitSync([op], new Deadline(options.timeoutMs, options.signal), `${this.device.label}: RecvBuffer.waitRecvSync (rank ${this.peer}, slot ${this.slot})`);
    this.consumed++;
  }

  /** Stops receiving into this buffer. */
  close(): void {
    this.device.pairs[this.peer]?.unpost(this.sink);
  }
}

/** Gloo's pair->createSendBuffer(slot, ptr, size). */
export function createSendBuffer(device: Device, peer: number, slot: number, view: ArrayBufferView): SendBuffer {
  return new SendBuffer(device, peer, slot, view);
}

/** Gloo's pair->createRecvBuffer(slot, ptr, size). */
export function createRecvBuffer(device: Device, peer: number, slot: number, view: ArrayBufferView): RecvBuffer {
  return new RecvBuffer(device, peer, slot, view);
}

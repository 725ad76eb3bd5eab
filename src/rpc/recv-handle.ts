/**
 * A received request, as `RpcEngine.recv()` hands it out. The payload lives in the recv ring
 * and stays valid until the next `poll()` (copy it to keep it longer); the handle itself
 * stays valid until `reply`, which may come any time later, in any order. Handles are
 * pooled: after `reply` the object is reused for a later request, so keep no reference past it.
 */
import { WeftError } from '../errors.js';
import { responsePayloadLimit } from './constants.js';
import type { Endpoint } from './endpoint.js';

export class RecvHandle<U = unknown> {
  /** The endpoint the request came from. */
  endpoint!: Endpoint<U>;
  /** The caller's call id (MSB clear). */
  callId = 0;
  /** Byte offset of the payload in `buffer`. */
  offset = 0;
  /** Payload length in bytes. */
  length = 0;
  /** Credit the caller reserved for the response: padded response + one metadata block. */
  internalAllowance = 0;
  /** @internal entry in the endpoint's release queue */
  holdSeq = 0;
  /** @internal false once replied (the object is back in the pool) */
  live = false;
  /**
   * @internal Grows each time the pooled object is handed out for a request: code that keeps
   * the handle across an await (serve's async handlers) checks it is still the same request.
   */
  generation = 0;

  /** The recv ring the payload lives in (payload valid until the next poll). */
  get buffer(): Uint8Array {
    return this.endpoint.recvRing;
  }

  /**
   * A view of the payload inside the recv ring, valid until the next poll. Allocates a view
   * object; the zero-allocation path reads `buffer` at `offset` / `length`.
   */
  get payload(): Uint8Array {
    return this.endpoint.recvRing.subarray(this.offset, this.offset + this.length);
  }

  /** Largest response payload `reply` accepts (what the caller's allowance covers). */
  get responseAllowance(): number {
    return responsePayloadLimit(this.internalAllowance);
  }

  /**
   * Writes the response into the send ring (sent at the next poll/flush). Never fails for
   * lack of space: the caller's credit reserved it. Throws EINVAL when `bytes` exceeds
   * `responseAllowance` or the handle was already replied to; does nothing when the
   * endpoint has failed meanwhile.
   *
   * @example
   * const h = rpc.recv();
   * if (h) h.reply(new TextEncoder().encode('pong'));
   */
  reply(bytes: Uint8Array): void {
    if (!this.live) throw new WeftError('EINVAL', 'reply(): this request was already replied to (handles are reused after reply; keep none past it)');
    this.endpoint.reply(this, bytes);
  }
}

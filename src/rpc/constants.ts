/**
 * copyrpc wire constants and the arithmetic the notes define on them (docs/rpc.md,
 * docs/wire-format.md "copyrpc"). Pure functions: both sides of a pair must compute the
 * same numbers from the same inputs, so everything that crosses the wire is defined here.
 */

/** Every message, batch and ring position is a multiple of this. */
export const ALIGNMENT = 32;
/** call id, piggyback, payload length: three little-endian u32. */
export const HEADER_SIZE = 12;
/** consumer position u64, credit grant u64, message count u32, 12 zero bytes. */
export const FLOW_METADATA_SIZE = 32;
/** Set in the call id of a response. */
export const RESPONSE_FLAG = 0x80000000;
/** Message count of a wrap marker: the rest of the ring cycle is skipped. */
export const WRAP_MESSAGE_COUNT = 0xffffffff;
/** One WRITE_IMM in this many is signaled (the send queue must be reaped now and then). */
export const SIGNAL_INTERVAL = 64;
/** Defaults of the notes. */
export const DEFAULT_RING_SIZE = 1 << 20;
export const DEFAULT_SRQ_SIZE = 1024;
/** Smallest and largest ring we accept (imm * 32 must stay well inside 2^53, offsets inside u32). */
export const MIN_RING_SIZE = 1024;
export const MAX_RING_SIZE = 1 << 30;

/**
 * What `Endpoint.call` returns when the call cannot be written now. Both are retryable:
 * poll (which brings consumer updates, READ results and credit grants) and call again.
 */
export const RING_FULL = -1;
export const INSUFFICIENT_CREDIT = -2;
/** `CallResult` is a call id (>= 0) or one of the retryable codes above. */
export type CallResult = number;

/** imm of a WRITE_IMM that carries `delta` bytes (a multiple of 32). */
export function encodeImm(delta: number): number {
  return (delta / ALIGNMENT) >>> 0;
}

/** Bytes a WRITE_IMM's immediate says were written. */
export function decodeImm(imm: number): number {
  return (imm >>> 0) * ALIGNMENT;
}

/** Header plus payload, rounded up to 32 bytes: 0 -> 32, 20 -> 32, 21 -> 64. */
export function paddedMessageSize(payloadLength: number): number {
  return Math.ceil((HEADER_SIZE + payloadLength) / ALIGNMENT) * ALIGNMENT;
}

/**
 * Credit a call consumes for a response of up to `responseAllowance` payload bytes: the
 * padded response plus one flow-metadata block, because the responder may have to open a new
 * batch (or emit a wrap marker) to write it.
 */
export function internalAllowance(responseAllowance: number): number {
  return paddedMessageSize(responseAllowance) + FLOW_METADATA_SIZE;
}

/** Largest response payload an internal allowance covers (inverse of internalAllowance). */
export function responsePayloadLimit(internal: number): number {
  return internal - FLOW_METADATA_SIZE - HEADER_SIZE;
}

/** Rounds down to a multiple of 32. */
export function alignDown(x: number): number {
  return Math.floor(x / ALIGNMENT) * ALIGNMENT;
}

/**
 * The ring size one direction of a pair uses for wraps, the invariant and grants: the sender's
 * send ring and the receiver's recv ring must both hold a whole cycle, so the smaller one.
 */
export function effectiveRing(senderSendRing: number, receiverRecvRing: number): number {
  return Math.min(senderSendRing, receiverRecvRing);
}

/**
 * The most response credit a side may have outstanding toward its peer (R's ceiling), and
 * so the initial credit: min(configured, C/4) with C the sender's effective ring. Both sides
 * derive it from the exchanged info, which is why no handshake is needed.
 */
export function maxResponseReservation(configured: number, ring: number): number {
  return alignDown(Math.min(configured, ring / 4));
}

/** True for a power of two within the accepted ring sizes. */
export function validRingSize(n: number): boolean {
  return Number.isInteger(n) && n >= MIN_RING_SIZE && n <= MAX_RING_SIZE && (n & (n - 1)) === 0;
}

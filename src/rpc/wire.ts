/**
 * Byte layouts of copyrpc (docs/wire-format.md, section "copyrpc"): the endpoint info blob
 * exchanged out of band, and encoders of the 32-byte flow metadata and the 12-byte message
 * header. The endpoint writes the same fields inline on its hot path; these encoders are the
 * reference used by tests and by tools that speak the protocol without an Endpoint.
 */
import { WeftError } from '../errors.js';
import { validRingSize } from './constants.js';

/** 'WRP1' little-endian. */
export const INFO_MAGIC = 0x31505257;
export const INFO_VERSION = 1;
export const INFO_FIXED_BYTES = 32;

/** What one endpoint tells its peer before they connect. */
export interface EndpointInfo {
  /** Bytes of this endpoint's recv ring (power of two). */
  recvRingSize: number;
  /** Bytes of this endpoint's send ring (power of two). */
  sendRingSize: number;
  /** Configured ceiling of the response reservation R (the initial credit is derived from it). */
  maxRespReservation: number;
  /** The NIC queue pair's address. */
  qpAddress: Uint8Array;
  /** Memory-region descriptor of the recv ring (peers WRITE_IMM into it). */
  recvRing: Uint8Array;
  /** Memory-region descriptor of the 8-byte consumer position (peers READ it). */
  consumer: Uint8Array;
}

/** Encodes an endpoint's info blob. */
export function encodeEndpointInfo(info: EndpointInfo): Uint8Array {
  const a = info.qpAddress.byteLength;
  const d = info.recvRing.byteLength;
  const e = info.consumer.byteLength;
  const out = new Uint8Array(INFO_FIXED_BYTES + a + d + e);
  const v = new DataView(out.buffer);
  v.setUint32(0, INFO_MAGIC, true);
  v.setUint8(4, INFO_VERSION);
  v.setUint32(8, info.recvRingSize, true);
  v.setUint32(12, info.sendRingSize, true);
  v.setUint32(16, info.maxRespReservation, true);
  v.setUint32(20, a, true);
  v.setUint32(24, d, true);
  v.setUint32(28, e, true);
  out.set(info.qpAddress, INFO_FIXED_BYTES);
  out.set(info.recvRing, INFO_FIXED_BYTES + a);
  out.set(info.consumer, INFO_FIXED_BYTES + a + d);
  return out;
}

/** Decodes and validates a peer's info blob; throws EPROTO naming `where` on malformed bytes. */
export function decodeEndpointInfo(bytes: Uint8Array, where: string): EndpointInfo {
  const bad = (why: string): never => {
    throw new WeftError('EPROTO', `${where}: the peer's endpoint info is malformed (${why}); pass the exact bytes of the peer's ep.localInfo()`);
  };
  if (!(bytes instanceof Uint8Array)) throw new WeftError('EINVAL', `${where}: remote info must be a Uint8Array (the peer's ep.localInfo()), got ${typeof bytes}`);
  if (bytes.byteLength < INFO_FIXED_BYTES) bad(`${bytes.byteLength} bytes`);
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (v.getUint32(0, true) !== INFO_MAGIC) bad('bad magic');
  if (v.getUint8(4) !== INFO_VERSION) bad(`version ${v.getUint8(4)}, this weft speaks ${INFO_VERSION}`);
  const recvRingSize = v.getUint32(8, true);
  const sendRingSize = v.getUint32(12, true);
  const maxRespReservation = v.getUint32(16, true);
  const a = v.getUint32(20, true);
  const d = v.getUint32(24, true);
  const e = v.getUint32(28, true);
  if (!validRingSize(recvRingSize) || !validRingSize(sendRingSize)) bad(`ring sizes ${recvRingSize}/${sendRingSize} are not powers of two in range`);
  if (maxRespReservation % 32 !== 0) bad('response reservation not a multiple of 32');
  if (INFO_FIXED_BYTES + a + d + e !== bytes.byteLength) bad('lengths do not add up');
  const o = bytes.byteOffset + INFO_FIXED_BYTES;
  return {
    recvRingSize,
    sendRingSize,
    maxRespReservation,
    qpAddress: new Uint8Array(bytes.buffer, o, a),
    recvRing: new Uint8Array(bytes.buffer, o + a, d),
    consumer: new Uint8Array(bytes.buffer, o + a + d, e),
  };
}

/** Writes a u64 (a safe integer) little-endian at byte `off`. */
export function writeU64(v: DataView, off: number, x: number): void {
  v.setUint32(off, x % 0x100000000, true);
  v.setUint32(off + 4, Math.floor(x / 0x100000000), true);
}

/** Reads a little-endian u64 as a number (exact below 2^53). */
export function readU64(v: DataView, off: number): number {
  return v.getUint32(off, true) + v.getUint32(off + 4, true) * 0x100000000;
}

/** Writes 32 bytes of flow metadata at `off` (consumer position, credit grant, count, zeros). */
export function writeFlowMetadata(v: DataView, off: number, consumerPos: number, creditGrant: number, messageCount: number): void {
  writeU64(v, off, consumerPos);
  writeU64(v, off + 8, creditGrant);
  v.setUint32(off + 16, messageCount >>> 0, true);
  v.setUint32(off + 20, 0, true);
  v.setUint32(off + 24, 0, true);
  v.setUint32(off + 28, 0, true);
}

/** Writes a 12-byte message header at `off`. */
export function writeHeader(v: DataView, off: number, callId: number, piggyback: number, payloadLength: number): void {
  v.setUint32(off, callId >>> 0, true);
  v.setUint32(off + 4, piggyback >>> 0, true);
  v.setUint32(off + 8, payloadLength >>> 0, true);
}

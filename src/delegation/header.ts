/** Checks shared by the segment headers of ipc and Flux (delegationrpc's is the notes' own). */
import { WeftError } from '../errors.js';
import { isPowerOfTwo } from './segment.js';

/** Throws EPROTO unless the segment starts with the 8-byte magic and the version. */
export function checkMagic(sab: SharedArrayBuffer, name: string, what: string, magic: string, version: number, headerBytes: number): DataView {
  if (sab.byteLength < headerBytes) throw new WeftError('EPROTO', `${what}: segment ${name} is ${sab.byteLength} bytes, shorter than its ${headerBytes}-byte header: not a ${what} segment`);
  const dv = new DataView(sab);
  let got = '';
  for (let i = 0; i < 8; i++) got += String.fromCharCode(dv.getUint8(i));
  if (got !== magic) throw new WeftError('EPROTO', `${what}: segment ${name} has magic ${JSON.stringify(got)}, want ${JSON.stringify(magic)}: not a ${what} segment`);
  const v = dv.getUint32(8, true);
  if (v !== version) throw new WeftError('EPROTO', `${what}: segment ${name} is version ${v}, this weft speaks version ${version}: use the same weft on both sides`);
  return dv;
}

/** Writes the magic and version. */
export function writeMagic(dv: DataView, magic: string, version: number): void {
  for (let i = 0; i < 8; i++) dv.setUint8(i, magic.charCodeAt(i));
  dv.setUint32(8, version, true);
}

/** EINVAL (from a caller) or EPROTO (from a segment header) for a value out of range. */
export function checkRange(v: number, lo: number, hi: number, field: string, where: string, pow2 = false, code: 'EINVAL' | 'EPROTO' = 'EINVAL'): void {
  if (!Number.isInteger(v) || v < lo || v > hi || (pow2 && !isPowerOfTwo(v))) {
    throw new WeftError(code, `${where}: ${field} must be ${pow2 ? 'a power of two' : 'an integer'} in [${lo}, ${hi}], got ${v}${code === 'EPROTO' ? ' (in the segment header: corrupt)' : ''}`);
  }
}

/** Segments stay under 2^31 bytes: Int32 word indices are byte offsets >> 2, negative beyond. */
export const SEGMENT_LIMIT = 2 ** 31;

/** EINVAL (or EPROTO from a header) when a layout of `total` bytes (made of `sizes`) reaches SEGMENT_LIMIT. */
export function checkSegmentBytes(total: number, sizes: string, where: string, code: 'EINVAL' | 'EPROTO' = 'EINVAL'): void {
  if (total >= SEGMENT_LIMIT) {
    throw new WeftError(code, `${where}: ${sizes} make a segment of ${total} bytes, at or over the limit of 2^31 = ${SEGMENT_LIMIT} bytes (word offsets are 32-bit)${code === 'EPROTO' ? ' (in the segment header: corrupt)' : ': lower one of them'}`);
  }
}

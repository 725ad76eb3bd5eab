/**
 * Byte copies between views of any memory without a per-call allocation. From
 * NATIVE_COPY_MIN bytes one native memcpy: V8 copies SharedArrayBuffer contents with
 * relaxed-atomic word loops (~6 GB/s here), a third of memcpy, and above a few KiB the ~50 ns
 * of one Node-API call is the cheaper price.
 */
import { native } from '../native/binding.js';

/** Copies at least this long go through the native memcpy. */
export const NATIVE_COPY_MIN = 2048;

/** dst[dOff, dOff + len) = src[sOff, sOff + len). */
export function copyInto(dst: Uint8Array, dOff: number, src: Uint8Array, sOff: number, len: number): void {
  if (len >= NATIVE_COPY_MIN) native.copyBytes(dst, dOff, src, sOff, len);
  else if (sOff === 0 && len === src.length) dst.set(src, dOff);
  // A partial source would need a subarray view (an allocation) for set().
  else for (let i = 0; i < len; i++) dst[dOff + i] = src[sOff + i];
}

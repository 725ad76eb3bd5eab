/**
 * Byte copies between views of any memory without a per-call allocation. From
 * NATIVE_COPY_MIN bytes one native memcpy: V8 copies SharedArrayBuffer contents with
 * relaxed-atomic word loops (~6 GB/s here), a third of memcpy, and above a few KiB the ~50 ns
 * of one Node-API call is the cheaper price. Small word-aligned copies between shared
 * segments (the shm provider's messages) run as an Int32 loop: a subarray view would cost
 * more than the copy.
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

/** Copies `len` bytes; `dst32`/`src32` are Int32Array views of the same buffers as dst/src. */
export function copyBytes(dst: Uint8Array, dst32: Int32Array, dOff: number, src: Uint8Array, src32: Int32Array, sOff: number, len: number): void {
  if (len <= 256) {
    if (((dOff | sOff | len) & 3) === 0) {
      const d = dOff >> 2;
      const s = sOff >> 2;
      const n = len >> 2;
      for (let i = 0; i < n; i++) dst32[d + i] = src32[s + i];
      return;
    }
    if (len <= 64) {
      for (let i = 0; i < len; i++) dst[dOff + i] = src[sOff + i];
      return;
    }
  }
  if (len >= NATIVE_COPY_MIN) native.copyBytes(dst, dOff, src, sOff, len);
  else dst.set(src.subarray(sOff, sOff + len), dOff);
}

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

/** Copies at most this long are assembled into words by copyToShared. */
const SHORT_COPY_MAX = 64;

/**
 * dst8[dst, dst + len) = src[0, len), into shared memory at a 4-aligned offset `dst`;
 * `dst32` views the same buffer as `dst8`. Stores into shared memory cost about 1.5 ns per
 * byte store here, so a short payload (up to 64 bytes) is assembled into little-endian 32-bit
 * words: about 18 ns for 32 B, against 50 ns byte-wise and 40 ns through TypedArray.set (a
 * builtin call). Every platform weft builds for is little-endian. Longer ones go through
 * copyInto.
 */
export function copyToShared(dst8: Uint8Array, dst32: Int32Array, dst: number, src: Uint8Array, len: number): void {
  if (len > SHORT_COPY_MAX) return copyInto(dst8, dst, src, 0, len);
  const n = len & ~3;
  let i = 0;
  for (let w = dst >>> 2; i < n; i += 4, w++) dst32[w] = src[i] | (src[i + 1] << 8) | (src[i + 2] << 16) | (src[i + 3] << 24);
  for (; i < len; i++) dst8[dst + i] = src[i];
}

/**
 * copyToShared for a caller that passes the same source array again and again (a request
 * buffer reused call after call, the usual case): from the source's second use in a row, it
 * is read as 32-bit words through an Int32Array view made once (about 20 ns for 32 B here,
 * against 35 assembling words from bytes). A caller that passes a new array every time never
 * pays for a view. Identity is the only test: reading `src.buffer` to recognise a source
 * costs more than the copy.
 */
export class ShortCopier {
  private last: Uint8Array | null = null;
  /** An Int32Array over `last` (4-aligned), once it came twice in a row; null otherwise. */
  private words: Int32Array | null = null;

  /** As copyToShared(dst8, dst32, dst, src, len); `dst` is 4-aligned. */
  copy(dst8: Uint8Array, dst32: Int32Array, dst: number, src: Uint8Array, len: number): void {
    // Longer copies go through copyInto as before: no view is made for them.
    if (len > SHORT_COPY_MAX) return copyInto(dst8, dst, src, 0, len);
    const words = this.words;
    const n = len >> 2;
    // The length check also catches a view gone stale (its buffer resized or detached).
    if (src === this.last && words !== null && words.length >= n) {
      const d = dst >>> 2;
      for (let i = 0; i < n; i++) dst32[d + i] = words[i];
      for (let i = n << 2; i < len; i++) dst8[dst + i] = src[i];
      return;
    }
    if (src === this.last) {
      // Its second use in a row, or its view went stale: a view, where one can serve (never
      // again and again for an unaligned source or one shorter than the copy).
      this.words = n > 0 && (src.byteOffset & 3) === 0 && src.length >> 2 >= n ? new Int32Array(src.buffer, src.byteOffset, src.length >> 2) : null;
    } else {
      this.last = src;
      this.words = null;
    }
    copyToShared(dst8, dst32, dst, src, len);
  }
}

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

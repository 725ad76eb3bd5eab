/**
 * Byte copy between shared segments without a per-message allocation: small word-aligned
 * copies run as an Int32 loop (a subarray view would cost more than the copy), medium ones
 * use Uint8Array#set, and large ones one native memcpy (see util/copy.ts for why).
 */
import { native } from '../../native/binding.js';
import { NATIVE_COPY_MIN } from '../../util/copy.js';

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

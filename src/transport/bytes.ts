/** Byte view of a typed array (same memory), with the check every entry point needs. */
import { WeftError } from '../errors.js';

export function bytesOf(view: ArrayBufferView, where = 'weft'): Uint8Array {
  if (!ArrayBuffer.isView(view)) throw new WeftError('EINVAL', `${where}: expected a typed array, got ${view === null ? 'null' : typeof view}`);
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}

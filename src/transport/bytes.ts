/** Byte view of a typed array (same memory), with the check every entry point needs. */
import { WeftError } from '../errors.js';
import { describeValue } from '../util/describe.js';

/**
 * Views already made, per array: collectives called in a loop on the same arrays would
 * otherwise build two views per call, each through the C++ `buffer` getter (~50 ns). Weak
 * keys: the cache never keeps an array alive.
 */
const views = new WeakMap<ArrayBufferView, Uint8Array>();

export function bytesOf(view: ArrayBufferView, where = 'weft'): Uint8Array {
  const hit = views.get(view);
  // A length-tracking view of a resizable buffer can change length; a fresh view then follows it.
  if (hit !== undefined && hit.length === view.byteLength) return hit;
  if (!ArrayBuffer.isView(view)) throw new WeftError('EINVAL', `${where}: expected a typed array, got ${describeValue(view)}`);
  const bytes = new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
  views.set(view, bytes);
  return bytes;
}

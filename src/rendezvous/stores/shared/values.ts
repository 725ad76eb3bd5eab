/**
 * How stores compare, encode and show values: byte equality, counters as ASCII decimal (as
 * in torch), short printable previews for messages, and the write-once conflict error.
 */
import { WeftError } from '../../../errors.js';

export function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.byteLength !== b.byteLength) return false;
  for (let i = 0; i < a.byteLength; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** Counter values are stored as ASCII decimal, as in torch, so `get` of a counter is readable. */
export function encodeCounter(n: number | bigint): Uint8Array {
  return new TextEncoder().encode(String(n));
}

/** A short, printable rendering of a value for error messages. */
export function preview(v: Uint8Array): string {
  const text = new TextDecoder('utf-8', { fatal: false }).decode(v.subarray(0, 48));
  // eslint-disable-next-line no-control-regex
  if (!/[\u0000-\u0008\u000e-\u001f\ufffd]/.test(text)) return `"${text}${v.byteLength > 48 ? '…' : ''}" (${v.byteLength} bytes)`;
  const hex = Buffer.from(v.subarray(0, 16)).toString('hex');
  return `0x${hex}${v.byteLength > 16 ? '…' : ''} (${v.byteLength} bytes)`;
}

/**
 * EEXIST for a write-once key: names the key and, when both are known and differ, both
 * values, and says what usually causes it.
 */
export function existsError(where: string, key: string, existing?: Uint8Array, attempted?: Uint8Array): WeftError {
  let values = '';
  if (existing && attempted) {
    values = sameBytes(existing, attempted)
      ? ` (with the same value ${preview(existing)})`
      : `: it holds ${preview(existing)}, this write was ${preview(attempted)}`;
  }
  return new WeftError('EEXIST', `${where}: write-once key '${key}' was already set${values}. Two ranks with the same rank number, or a stale job that used the same prefix? Start the job with a fresh prefix (or purge the old one's keys).`);
}


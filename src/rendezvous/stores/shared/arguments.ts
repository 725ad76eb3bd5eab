/** Argument checks every store runs before it talks to its backend. */
import { WeftError } from '../../../errors.js';

export function checkKey(where: string, key: unknown): asserts key is string {
  if (typeof key !== 'string' || key.length === 0) throw new WeftError('EINVAL', `${where}: a key must be a non-empty string, got ${typeof key === 'string' ? 'an empty string' : typeof key}`);
}

export function checkKeys(where: string, keys: unknown): asserts keys is string[] {
  if (!Array.isArray(keys)) throw new WeftError('EINVAL', `${where}: keys must be an array of strings`);
  for (const k of keys) checkKey(where, k);
}

export function checkValue(where: string, key: string, value: unknown): asserts value is Uint8Array {
  if (!(value instanceof Uint8Array)) throw new WeftError('EINVAL', `${where}('${key}'): the value must be a Uint8Array (encode strings with TextEncoder), got ${value === null ? 'null' : typeof value}`);
}

export function checkDelta(where: string, key: string, delta: unknown): asserts delta is number {
  if (typeof delta !== 'number' || !Number.isSafeInteger(delta)) throw new WeftError('EINVAL', `${where}('${key}'): delta must be a safe integer, got ${String(delta)}`);
}


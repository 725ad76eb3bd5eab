/**
 * The common head of every address blob and memory-region descriptor: magic, version,
 * provider tag, then the owner's identity. Bodies are provider-specific (docs/wire-format.md).
 */
import { WeftError } from '../errors.js';
import { decodeIdentity, encodeIdentity, IDENTITY_BYTES, type ProcessIdentity } from '../host/identity.js';

/** Bytes before a blob's provider-specific body. */
export const BLOB_HEAD_BYTES = 8 + IDENTITY_BYTES;
export const BLOB_VERSION = 1;
export const PROVIDER_TAG = { shm: 1, ofi: 2 } as const;

/** Allocates a blob of `bytes` and writes its head; returns the view to write the body with. */
export function newBlob(bytes: number, magic: number, provider: number, id: ProcessIdentity): { out: Uint8Array; view: DataView } {
  const out = new Uint8Array(bytes);
  const view = new DataView(out.buffer);
  view.setUint32(0, magic, true);
  view.setUint8(4, BLOB_VERSION);
  view.setUint8(5, provider);
  encodeIdentity(view, 8, id);
  return { out, view };
}

/**
 * Checks a blob's head and returns its view and owner identity. Throws EPROTO on bytes that
 * are not such a blob, EINVAL on a blob of another provider.
 */
export function readBlob(bytes: Uint8Array, magic: number, provider: number, what: string, where: string): { view: DataView; identity: ProcessIdentity } {
  if (!(bytes instanceof Uint8Array) || bytes.byteLength < BLOB_HEAD_BYTES) {
    throw new WeftError('EPROTO', `${where}: not a ${what} (${bytes instanceof Uint8Array ? `${bytes.byteLength} bytes` : typeof bytes})`);
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (view.getUint32(0, true) !== magic || view.getUint8(4) !== BLOB_VERSION) {
    throw new WeftError('EPROTO', `${where}: not a ${what} (bad magic or version)`);
  }
  if (view.getUint8(5) !== provider) {
    throw new WeftError('EINVAL', `${where}: the ${what} is from another provider; both sides of a pair must use the same provider`);
  }
  return { view, identity: decodeIdentity(view, 8) };
}

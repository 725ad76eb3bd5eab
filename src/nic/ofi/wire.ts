/**
 * Bytes the ofi provider exchanges through the application: QP address blobs and memory
 * region descriptors. All little-endian; both start with magic, version 1 and provider tag 2
 * (shm uses the same magics with tag 1, so mixing providers is a clear error).
 *
 * Address blob (80 + A + P bytes):
 *   0  u32 'WQP1'   4 u8 version=1   5 u8 provider=2   6 u16 A (fabric address length)
 *   8  identity (32 bytes, src/nic/identity.ts)
 *   40 u32 qpn      44 u32 device nonce   48 u32 credits granted so far   52 u32 cq_data_size
 *   56 u64 control-region address   64 u64 control-region key   72 u32 control-region length
 *   76 u8 P (provider name length)   77..79 zero
 *   80 fabric address (A bytes, fi_getname)   80+A libfabric provider name (P bytes, latin1)
 *
 * Region descriptor (72 bytes):
 *   0  u32 'WMR1'   4 u8 version=1   5 u8 provider=2   6 u16 zero
 *   8  identity (32 bytes)   40 u32 device nonce   44 u32 MR-table slot
 *   48 u32 generation (random, nonzero)   52 u32 length   56 u64 address   64 u64 key
 */
import { WeftError } from '../../errors.js';
import { decodeIdentity, encodeIdentity, IDENTITY_BYTES, type ProcessIdentity } from '../../host/identity.js';

export const QP_MAGIC = 0x31505157;
export const MR_MAGIC = 0x31524d57;
export const PROVIDER_OFI = 2;
export const ADDR_FIXED = 80;
export const DESCRIPTOR_BYTES = 72;
/** Offset of the key in a descriptor (tests forge keys there). */
export const DESCRIPTOR_KEY_OFFSET = 64;

export interface QpAddress {
  identity: ProcessIdentity;
  qpn: number;
  nonce: number;
  granted: number;
  cqDataSize: number;
  ctlAddr: bigint;
  ctlKey: bigint;
  ctlLen: number;
  fabricAddress: Uint8Array;
  provider: string;
}

export function encodeAddress(a: QpAddress): Uint8Array {
  const prov = Buffer.from(a.provider, 'latin1');
  const out = new Uint8Array(ADDR_FIXED + a.fabricAddress.byteLength + prov.length);
  const v = new DataView(out.buffer);
  v.setUint32(0, QP_MAGIC, true);
  v.setUint8(4, 1);
  v.setUint8(5, PROVIDER_OFI);
  v.setUint16(6, a.fabricAddress.byteLength, true);
  encodeIdentity(v, 8, a.identity);
  v.setUint32(40, a.qpn, true);
  v.setUint32(44, a.nonce, true);
  v.setUint32(48, a.granted >>> 0, true);
  v.setUint32(52, a.cqDataSize, true);
  v.setBigUint64(56, a.ctlAddr, true);
  v.setBigUint64(64, a.ctlKey, true);
  v.setUint32(72, a.ctlLen, true);
  v.setUint8(76, prov.length);
  out.set(a.fabricAddress, ADDR_FIXED);
  out.set(prov, ADDR_FIXED + a.fabricAddress.byteLength);
  return out;
}

/** Decodes an address blob; malformed bytes throw EPROTO, another provider EINVAL. */
export function decodeAddress(bytes: Uint8Array, where: string): QpAddress {
  if (!(bytes instanceof Uint8Array) || bytes.byteLength < ADDR_FIXED) throw new WeftError('EPROTO', `${where}: the address is not an ofi QP address (too short)`);
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (v.getUint32(0, true) !== QP_MAGIC || v.getUint8(4) !== 1) throw new WeftError('EPROTO', `${where}: the address is not a weft QP address (bad magic or version)`);
  if (v.getUint8(5) !== PROVIDER_OFI) throw new WeftError('EINVAL', `${where}: the peer QP is not on the ofi provider; both sides of a pair must use the same provider`);
  const alen = v.getUint16(6, true);
  const plen = v.getUint8(76);
  if (bytes.byteLength !== ADDR_FIXED + alen + plen || alen === 0) throw new WeftError('EPROTO', `${where}: malformed ofi QP address (length fields do not match)`);
  return {
    identity: decodeIdentity(v, 8),
    qpn: v.getUint32(40, true),
    nonce: v.getUint32(44, true),
    granted: v.getUint32(48, true),
    cqDataSize: v.getUint32(52, true),
    ctlAddr: v.getBigUint64(56, true),
    ctlKey: v.getBigUint64(64, true),
    ctlLen: v.getUint32(72, true),
    fabricAddress: bytes.slice(ADDR_FIXED, ADDR_FIXED + alen),
    provider: Buffer.from(bytes.subarray(ADDR_FIXED + alen)).toString('latin1'),
  };
}

export interface RegionDescriptor {
  identity: ProcessIdentity;
  nonce: number;
  slot: number;
  gen: number;
  length: number;
  addr: bigint;
  key: bigint;
}

export function encodeDescriptor(d: RegionDescriptor): Uint8Array {
  const out = new Uint8Array(DESCRIPTOR_BYTES);
  const v = new DataView(out.buffer);
  v.setUint32(0, MR_MAGIC, true);
  v.setUint8(4, 1);
  v.setUint8(5, PROVIDER_OFI);
  encodeIdentity(v, 8, d.identity);
  v.setUint32(8 + IDENTITY_BYTES, d.nonce, true);
  v.setUint32(44, d.slot, true);
  v.setUint32(48, d.gen, true);
  v.setUint32(52, d.length, true);
  v.setBigUint64(56, d.addr, true);
  v.setBigUint64(64, d.key, true);
  return out;
}

export function decodeDescriptor(bytes: Uint8Array, where: string): RegionDescriptor {
  if (!(bytes instanceof Uint8Array) || bytes.byteLength !== DESCRIPTOR_BYTES) {
    throw new WeftError('EPROTO', `${where}: an ofi region descriptor is ${DESCRIPTOR_BYTES} bytes, got ${bytes instanceof Uint8Array ? bytes.byteLength : typeof bytes}`);
  }
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (v.getUint32(0, true) !== MR_MAGIC || v.getUint8(4) !== 1 || v.getUint8(5) !== PROVIDER_OFI) {
    throw new WeftError('EPROTO', `${where}: not an ofi memory-region descriptor (bad magic, version or provider)`);
  }
  return {
    identity: decodeIdentity(v, 8),
    nonce: v.getUint32(40, true),
    slot: v.getUint32(44, true),
    gen: v.getUint32(48, true),
    length: v.getUint32(52, true),
    addr: v.getBigUint64(56, true),
    key: v.getBigUint64(64, true),
  };
}

/**
 * Memory regions of the shm provider. A region is a byte range of one of the owner's data
 * segments, entered in the owner's memory-region table under a random key. Peers check every
 * access against that table (key and bounds), so a forged or stale descriptor is an error
 * completion, never a stray write. Descriptor layout: docs/wire-format.md.
 */
import { WeftError } from '../../errors.js';
import type { ProcessIdentity } from '../../host/identity.js';
import { BLOB_HEAD_BYTES, newBlob, PROVIDER_TAG, readBlob } from '../blob.js';
import type { MemoryRegion, RemoteRegion } from '../types.js';
import type { PeerControl } from './peer.js';
import * as L from './layout.js';

/** 'WMR1' little-endian. */
export const MR_MAGIC = 0x31524d57;
export const DESCRIPTOR_BYTES = BLOB_HEAD_BYTES + 16;

/** What a device lends its regions: the table they live in and their owner's identity. */
export interface RegionOwner {
  readonly ctl: Int32Array;
  readonly identity: ProcessIdentity;
  readonly nonce: number;
  releaseSlot(slot: number, mr: ShmMemoryRegion): void;
}

export class ShmMemoryRegion implements MemoryRegion {
  readonly bytes: Uint8Array;
  deregistered = false;
  constructor(
    readonly owner: RegionOwner,
    readonly slot: number,
    readonly key: number,
    readonly segId: number,
    /** Whole-segment views, for copies by absolute offset. */
    readonly seg8: Uint8Array,
    readonly seg32: Int32Array,
    readonly offset: number,
    readonly byteLength: number,
  ) {
    this.bytes = seg8.subarray(offset, offset + byteLength);
  }

  descriptor(): Uint8Array {
    if (this.deregistered) throw new WeftError('ECLOSED', 'descriptor(): the memory region was deregistered');
    const { out, view: v } = newBlob(DESCRIPTOR_BYTES, MR_MAGIC, PROVIDER_TAG.shm, this.owner.identity);
    const o = BLOB_HEAD_BYTES;
    v.setInt32(o, this.owner.nonce, true);
    v.setUint32(o + 4, this.slot, true);
    v.setInt32(o + 8, this.key, true);
    v.setUint32(o + 12, this.byteLength, true);
    return out;
  }

  deregister(): void {
    if (this.deregistered) return;
    this.deregistered = true;
    const e = L.MR_TABLE + this.slot * L.MR_WORDS;
    Atomics.store(this.owner.ctl, e, 0);
    this.owner.releaseSlot(this.slot, this);
  }
}

export class ShmRemoteRegion implements RemoteRegion {
  constructor(
    readonly peer: PeerControl,
    readonly slot: number,
    readonly key: number,
    readonly seg8: Uint8Array,
    readonly seg32: Int32Array,
    readonly base: number,
    readonly byteLength: number,
  ) {}

  private view: Uint8Array | undefined;
  get direct(): Uint8Array | undefined {
    if (this.key === 0) return undefined;
    return (this.view ??= this.seg8.subarray(this.base, this.base + this.byteLength));
  }

  /**
   * True while the owner's table still holds this registration. A plain load, not
   * Atomics.load (a builtin call on every operation): a deregistration racing an operation
   * has no defined outcome on a NIC either, and once it is visible every later access fails.
   */
  valid(): boolean {
    return this.peer.i32[L.MR_TABLE + this.slot * L.MR_WORDS] === this.key && this.key !== 0;
  }
}

const EMPTY8 = new Uint8Array(0);
const EMPTY32 = new Int32Array(0);

/**
 * Decodes a descriptor from `peer`. A descriptor whose key is not (or no longer) in the
 * peer's table still decodes, into a region every access to which fails with REMOTE_ACCESS,
 * as a bad rkey does on RDMA hardware. Malformed bytes throw EPROTO.
 */
export function importShmRegion(peer: PeerControl, bytes: Uint8Array, where: string): ShmRemoteRegion {
  const { view: v, identity: id } = readBlob(bytes, MR_MAGIC, PROVIDER_TAG.shm, 'memory-region descriptor', where);
  if (bytes.byteLength !== DESCRIPTOR_BYTES) throw new WeftError('EPROTO', `${where}: a shm region descriptor is ${DESCRIPTOR_BYTES} bytes, got ${bytes.byteLength}`);
  const o = BLOB_HEAD_BYTES;
  if (id.hostId !== peer.identity.hostId || id.pid !== peer.identity.pid || id.startTime !== peer.identity.startTime || v.getInt32(o, true) !== peer.nonce) {
    throw new WeftError('EINVAL', `${where}: the descriptor belongs to another process than ${peer.label}; import it on the QP connected to its owner`);
  }
  const slot = v.getUint32(o + 4, true);
  const key = v.getInt32(o + 8, true);
  if (slot >= L.MAX_MRS) return new ShmRemoteRegion(peer, 0, 0, EMPTY8, EMPTY32, 0, 0);
  const e = L.MR_TABLE + slot * L.MR_WORDS;
  const t = peer.i32;
  if (key === 0 || Atomics.load(t, e) !== key) return new ShmRemoteRegion(peer, slot, 0, EMPTY8, EMPTY32, 0, 0);
  const segId = t[e + 1] >>> 0;
  const base = t[e + 2] >>> 0;
  const len = t[e + 3] >>> 0;
  const sab = peer.segment(segId);
  if (base + len > sab.byteLength) {
    throw new WeftError('EPROTO', `${where}: ${peer.label}'s region table entry ${slot} points past its segment`);
  }
  return new ShmRemoteRegion(peer, slot, key, new Uint8Array(sab), new Int32Array(sab, 0, sab.byteLength >> 2), base, len);
}

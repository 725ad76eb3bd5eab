/**
 * Memory regions of the ofi provider. A region is JS memory registered with libfabric in
 * place, plus an entry in the device's MR table (control region) that peers read to verify a
 * descriptor before its first use: libfabric 1.17's tcp and shm drop a write with a wrong key
 * silently, and shm stalls the endpoint on a read with one, so a bad key must never reach the
 * fabric. Descriptor layout: wire.ts.
 *
 * Limit: a verification is cached per imported region. If the owner deregisters a region
 * after a peer verified it, that peer's later accesses reach the fabric with a dead key: tcp
 * (1.17) then resets the connection between the two processes, and a READ may stall shm.
 * Layers that deregister memory peers may hold retire the key with them first (the transfer
 * engine: transfer/key-revocation.ts).
 */
import { WeftError } from '../../errors.js';
import type { ProcessIdentity } from '../../host/identity.js';
import type { MemoryRegion, RemoteRegion } from '../types.js';
import { encodeDescriptor } from './wire.js';
import { MR_ENTRY, MR_TABLE } from './layout.js';

/** What a region needs from its device. */
export interface RegionOwner {
  readonly identity: ProcessIdentity;
  readonly nonce: number;
  readonly ctl32: Uint32Array;
  release(region: OfiMemoryRegion): void;
}

export class OfiMemoryRegion implements MemoryRegion {
  readonly byteLength: number;
  deregistered = false;
  /**
   * Operations issued to the fabric with this region as their local memory, not yet
   * completed. A region deregistered meanwhile keeps its registration (and its memory) until
   * they are: the provider reads a WRITE's bytes and fills a READ's after the post.
   */
  inFlight = 0;
  /** Deregistered while `inFlight` > 0: the device releases it when that reaches 0. */
  releasePending = false;
  /**
   * An operation on it was abandoned (its QP failed or closed) while the provider may still
   * use the bytes: its memory stays until the endpoint closes.
   */
  pinned = false;
  constructor(
    readonly owner: RegionOwner,
    readonly bytes: Uint8Array,
    /** Native MR handle. */
    readonly handle: number,
    readonly slot: number,
    readonly gen: number,
    readonly addr: bigint,
    readonly key: bigint,
  ) {
    this.byteLength = bytes.byteLength;
    const e = (MR_TABLE + slot * MR_ENTRY) >> 2;
    const t = owner.ctl32;
    t[e + 1] = this.byteLength;
    t[e + 2] = Number(addr & 0xffffffffn);
    t[e + 3] = Number(addr >> 32n);
    t[e + 4] = Number(key & 0xffffffffn);
    t[e + 5] = Number(key >> 32n);
    t[e] = gen;
  }

  descriptor(): Uint8Array {
    if (this.deregistered) throw new WeftError('ECLOSED', 'descriptor(): the memory region was deregistered');
    return encodeDescriptor({ identity: this.owner.identity, nonce: this.owner.nonce, slot: this.slot, gen: this.gen, length: this.byteLength, addr: this.addr, key: this.key });
  }

  deregister(): void {
    if (this.deregistered) return;
    this.deregistered = true;
    // Clear the table entry first: peers verifying from now on see the region gone.
    this.owner.ctl32.fill(0, (MR_TABLE + this.slot * MR_ENTRY) >> 2, (MR_TABLE + (this.slot + 1) * MR_ENTRY) >> 2);
    this.owner.release(this);
  }
}

export const UNVERIFIED = 0;
export const VERIFYING = 1;
export const VALID = 2;
export const INVALID = 3;

/** A peer's region as imported on one QP; verified against the peer's MR table on first use. */
export class OfiRemoteRegion implements RemoteRegion {
  state = UNVERIFIED;
  readonly addrLo: number;
  readonly addrHi: number;
  readonly keyLo: number;
  readonly keyHi: number;
  constructor(
    /** The QP it was imported on. */
    readonly owner: object,
    readonly slot: number,
    readonly gen: number,
    readonly byteLength: number,
    readonly addr: bigint,
    readonly key: bigint,
  ) {
    this.addrLo = Number(addr & 0xffffffffn);
    this.addrHi = Number(addr >> 32n);
    this.keyLo = Number(key & 0xffffffffn);
    this.keyHi = Number(key >> 32n);
  }

  /** Compares the peer's MR-table entry (8 words read into `words` at `at`) with this descriptor. */
  matches(words: Uint32Array, at: number): boolean {
    return (
      words[at] === this.gen &&
      this.gen !== 0 &&
      words[at + 1] === this.byteLength &&
      words[at + 2] === this.addrLo &&
      words[at + 3] === this.addrHi &&
      words[at + 4] === this.keyLo &&
      words[at + 5] === this.keyHi
    );
  }
}

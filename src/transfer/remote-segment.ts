/**
 * A segment opened by `openSegment`: the owner's descriptor as last read from the store, its
 * buffers sorted by address for an O(log n) lookup per request, and each buffer's NIC region
 * imported lazily, once per path (QP) that carries a slice to it.
 */
import type { QueuePair, RemoteRegion } from '../nic/types.js';
import { rkeyBytes, type SegmentDesc } from './segment-desc.js';

export class RemoteBuffer {
  /** regions[path]: the buffer's region as imported on that path's QP. */
  readonly regions: (RemoteRegion | undefined)[] = [];
  /** Its owner retired the key (key-revocation.ts): queued slices to it fail instead of posting. */
  retired = false;
  /** Slices to it in the fabric (a retirement is acknowledged once none is). */
  flying = 0;
  private readonly key: Uint8Array;
  constructor(
    readonly addr: number,
    readonly length: number,
    /** Start of the buffer inside its region. */
    readonly offset: number,
    readonly rkey: string,
  ) {
    this.key = rkeyBytes(rkey);
  }

  /** The region on path `p` (imported on first use; throws EPROTO for a malformed key). */
  region(p: number, qp: QueuePair): RemoteRegion {
    return (this.regions[p] ??= qp.importRegion(this.key));
  }

  same(addr: number, length: number, offset: number, rkey: string): boolean {
    return this.addr === addr && this.length === length && this.offset === offset && this.rkey === rkey;
  }
}

export class RemoteSegment {
  buffers: RemoteBuffer[] = [];
  desc!: SegmentDesc;
  /** A refresh from the store under way (requests that missed the cache wait for it). */
  refreshing: Promise<void> | undefined;
  /** performance.now() of the last refresh. */
  refreshedAt = 0;
  /** Descriptors of the same engine older than this are refused: they list retired keys. */
  minVersion = 0;
  /**
   * Buffers dropped from this copy (retired by their owner, or gone from a newer descriptor)
   * while slices to them may still fly: a retirement is acknowledged once none does.
   */
  dropped: RemoteBuffer[] = [];
  /** Keep `dropped` (its owner is reached through the fabric; key-revocation.ts reads it). */
  tracksDropped = false;

  constructor(
    readonly id: number,
    readonly name: string,
    readonly rank: number,
    desc: SegmentDesc,
  ) {
    this.update(desc);
  }

  /** Takes a newer descriptor, keeping the imported regions of buffers that did not change. */
  /** Takes a newer descriptor (false: `desc` is older than what this copy must be, and was ignored). */
  update(desc: SegmentDesc): boolean {
    // An older copy of the same engine's descriptor loses; another engine's (re-opened under
    // the same name) wins whatever its version.
    if (this.desc && desc.instance === this.desc.instance && desc.version < Math.max(this.desc.version, this.minVersion)) return desc.version >= this.minVersion;
    const old = this.buffers;
    this.desc = desc;
    this.buffers = desc.buffers.map((b) => old.find((o) => o.same(b.addr, b.length, b.offset, b.rkey[0])) ?? new RemoteBuffer(b.addr, b.length, b.offset, b.rkey[0]));
    // A buffer gone (or under a new key) in the newer copy is dead to this engine from now on:
    // its queued slices fail rather than use a key its owner is closing.
    this.drop(old.filter((o) => !this.buffers.includes(o)));
    this.refreshedAt = performance.now();
    return true;
  }

  /** Drops the buffer at `addr` from this copy (its owner retired its key as of descriptor `version`). */
  retire(addr: number, version: number): RemoteBuffer[] {
    this.minVersion = Math.max(this.minVersion, version);
    // A copy as new as the retirement no longer lists that buffer: one at the same address is
    // a later registration (a new key), and stays.
    if (this.desc.version >= version) return [];
    const gone = this.buffers.filter((b) => b.addr === addr);
    return this.drop(gone);
  }

  /** Drops every buffer of this copy (the owner closed its engine, or records were lost). */
  retireAll(version: number): RemoteBuffer[] {
    this.minVersion = Math.max(this.minVersion, version);
    return this.drop(this.buffers.slice());
  }

  private drop(gone: RemoteBuffer[]): RemoteBuffer[] {
    for (const b of gone) {
      b.retired = true;
      if (b.flying > 0 && this.tracksDropped) this.dropped.push(b);
    }
    if (gone.length > 0) this.buffers = this.buffers.filter((b) => !b.retired);
    return gone;
  }

  /** True when no slice to a dropped buffer is in the fabric any more. */
  drained(): boolean {
    if (this.dropped.length > 0) this.dropped = this.dropped.filter((b) => b.flying > 0);
    return this.dropped.length === 0;
  }

  /** The buffer holding `[addr, addr + length)`, or undefined. */
  find(addr: number, length: number): RemoteBuffer | undefined {
    const bs = this.buffers;
    let lo = 0;
    let hi = bs.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const b = bs[mid];
      if (addr < b.addr) hi = mid - 1;
      else if (addr >= b.addr + b.length) lo = mid + 1;
      else return addr + length <= b.addr + b.length ? b : undefined;
    }
    return undefined;
  }
}

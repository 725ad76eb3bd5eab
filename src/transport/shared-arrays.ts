/**
 * Typed arrays in registered memory, and the peers' ones seen through the shm mapping.
 *
 * An array from `alloc` lives in a region of the NIC device: on shm a peer on this host can
 * import its descriptor and read the bytes in place (`RemoteRegion.direct`), so a collective
 * over such arrays moves each byte once, with no ring in between (see the `shared` allreduce).
 * Arrays in the JS heap cannot be shared that way; collectives stage them through the rings.
 */
import { WeftError } from '../errors.js';
import type { MemoryRegion, RemoteRegion, QueuePair } from '../nic/types.js';
import { MixedMemoryRegion } from '../nic/mixed/device.js';
import { dtypeOf, type TypedArray } from '../reduce/index.js';

/** A typed-array constructor `alloc` accepts. */
export type TypedArrayConstructor<T extends TypedArray> = {
  new (buffer: ArrayBufferLike, byteOffset: number, length: number): T;
  readonly BYTES_PER_ELEMENT: number;
};

/** Bytes of one array's record in a collective's exchange (see `record`). */
export const SHARED_RECORD_BYTES = 96;
const DESC_MAX = SHARED_RECORD_BYTES - 16;

interface Owned {
  readonly mr: MemoryRegion;
  /** What a peer on this host imports to read the bytes in place (undefined: nothing can). */
  readonly descriptor: Uint8Array | undefined;
}

/**
 * The descriptor of `mr` for a peer on this host: on shm the region's own; on a device that
 * mixes providers (a job that spans hosts) the shared-memory part alone, which the mixed QP
 * toward a rank of this host imports (the whole one, with the fabric part, does not fit a record).
 */
function hostDescriptor(mr: MemoryRegion, provider: string): Uint8Array | undefined {
  if (mr instanceof MixedMemoryRegion) return mr.shm?.descriptor();
  return provider === 'shm' ? mr.descriptor() : undefined;
}

interface Imported {
  readonly descriptor: Uint8Array;
  readonly region: RemoteRegion;
}

export interface SharedArraysHost {
  readonly label: string;
  readonly nic: { allocate(byteLength: number): MemoryRegion; readonly provider: string };
  queuePair(rank: number): QueuePair | undefined;
}

export class SharedArrays {
  /** Registered allocations by their buffer (one region per buffer: alloc never packs two). */
  private readonly owned = new WeakMap<ArrayBufferLike, Owned>();
  /** Per peer, the regions imported from it, most recent first (a loop reuses the same few). */
  private readonly imported = new Map<number, Imported[]>();

  constructor(private readonly host: SharedArraysHost) {}

  alloc<T extends TypedArray>(ctor: TypedArrayConstructor<T>, length: number): T {
    const where = `${this.host.label}: alloc`;
    const bpe = ctor?.BYTES_PER_ELEMENT;
    if (typeof ctor !== 'function' || !Number.isInteger(bpe)) throw new WeftError('EINVAL', `${where}: the first argument must be a typed-array constructor (Float32Array, BigInt64Array, ...)`);
    // Only element types the collectives take: an array none of them accepts is no use here.
    try {
      dtypeOf(new ctor(new ArrayBuffer(0), 0, 0));
    } catch (err) {
      throw new WeftError('EINVAL', `${where}: ${ctor.name}: ${(err as Error).message.replace(/^dtypeOf: /, '')}`);
    }
    if (!Number.isInteger(length) || length < 1 || length * bpe > 0xffffffff) throw new WeftError('EINVAL', `${where}: length must be an integer in [1, 4 GiB / ${bpe}), got ${length}`);
    const mr = this.host.nic.allocate(length * bpe);
    const array = new ctor(mr.bytes.buffer, mr.bytes.byteOffset, length);
    this.owned.set(mr.bytes.buffer, { mr, descriptor: hostDescriptor(mr, this.host.nic.provider) });
    return array;
  }

  /**
   * Writes `view`'s record at `out[at..at + SHARED_RECORD_BYTES)`: flag 1, offset in its
   * region, byte length, descriptor length, descriptor. Flag 0 when the view is not shared.
   */
  record(view: Uint8Array, out: Uint8Array, at: number): void {
    const o = this.owned.get(view.buffer);
    const w = new DataView(out.buffer, out.byteOffset + at, SHARED_RECORD_BYTES);
    if (o?.descriptor === undefined || o.descriptor.length > DESC_MAX) {
      w.setUint32(0, 0, true);
      return;
    }
    w.setUint32(0, 1, true);
    w.setUint32(4, view.byteOffset - o.mr.bytes.byteOffset, true);
    w.setUint32(8, view.byteLength, true);
    w.setUint32(12, o.descriptor.length, true);
    out.set(o.descriptor, at + 16);
  }

  /** The region of `view` when it lies in an array from `alloc` (one region per buffer). */
  regionOf(view: ArrayBufferView): MemoryRegion | undefined {
    return this.owned.get(view.buffer)?.mr;
  }

  /** The flag of a record written by `record`. */
  static isShared(rec: Uint8Array, at: number): boolean {
    return rec[at] === 1;
  }

  /** The byte length in a record. */
  static byteLength(rec: Uint8Array, at: number): number {
    return new DataView(rec.buffer, rec.byteOffset + at, 16).getUint32(8, true);
  }

  /**
   * Rank `peer`'s array described by the record at `rec[at..]`, as a view of its bytes through
   * this process's mapping. The region is imported once and reused while the peer passes it.
   */
  peerView(peer: number, rec: Uint8Array, at: number): Uint8Array {
    const w = new DataView(rec.buffer, rec.byteOffset + at, SHARED_RECORD_BYTES);
    const offset = w.getUint32(4, true);
    const len = w.getUint32(8, true);
    const dlen = w.getUint32(12, true);
    if (dlen > DESC_MAX) throw new WeftError('EPROTO', `${this.host.label}: rank ${peer} published a malformed shared-array record (descriptor of ${dlen} bytes)`);
    const desc = rec.subarray(at + 16, at + 16 + dlen);
    let list = this.imported.get(peer);
    if (list === undefined) this.imported.set(peer, (list = []));
    let hit = list.findIndex((e) => sameBytes(e.descriptor, desc));
    if (hit < 0) {
      const qp = this.host.queuePair(peer);
      if (!qp) throw new WeftError('EINVAL', `${this.host.label}: no connection to rank ${peer} to import its shared array`);
      list.unshift({ descriptor: desc.slice(), region: qp.importRegion(desc) });
      if (list.length > 8) list.pop();
      hit = 0;
    }
    const direct = list[hit].region.direct;
    if (!direct || offset + len > direct.length) throw new WeftError('EPROTO', `${this.host.label}: rank ${peer}'s shared array [${offset}, ${offset + len}) is not readable in place here (region of ${direct?.length ?? 0} bytes)`);
    return direct.subarray(offset, offset + len);
  }
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/**
 * This rank's registered buffers and the segment's address space.
 *
 * Every ArrayBuffer that holds a registered view gets a window of addresses, fixed at its
 * first registration and never reused while the engine lives, and a view's `addr` is that
 * window's start plus the view's byteOffset: two views of one array get addresses as far apart
 * as their bytes, as virtual addresses would be. Each registration is its own NIC region
 * covering exactly the view (so unregistering revokes peers' access to it, and only to it).
 */
import { WeftError } from '../errors.js';
import type { Device, MemoryRegion } from '../nic/types.js';
import { describeValue as describe } from '../util/describe.js';

/** Addresses start here (a safe integer far from 0, so that 0 is never a valid address). */
const ADDRESS_BASE = 2 ** 40;
/** Windows are aligned to this. */
const WINDOW_ALIGN = 1 << 16;

/** A registered view. */
export class LocalBuffer {
  /** Requests in flight with their source here (unregister is refused while > 0). */
  inflight = 0;
  /** The view's byte range in its ArrayBuffer (plain fields: read for every request). */
  readonly start: number;
  readonly end: number;
  constructor(
    readonly bytes: Uint8Array,
    readonly mr: MemoryRegion,
    readonly addr: number,
    readonly location: string,
  ) {
    this.start = bytes.byteOffset;
    this.end = bytes.byteOffset + bytes.byteLength;
  }
}

export class LocalMemory {
  private readonly byBuffer = new Map<ArrayBufferLike, LocalBuffer[]>();
  private readonly windows = new WeakMap<ArrayBufferLike, number>();
  private nextAddress = ADDRESS_BASE;
  /** The buffer find() saw last and its list (the list object lives as long as its entry). */
  private lastBuffer: ArrayBufferLike | undefined;
  private lastList: LocalBuffer[] = [];
  /** Every registered buffer, in registration order. */
  readonly all: LocalBuffer[] = [];

  constructor(
    private readonly device: Device,
    private readonly label: string,
  ) {}

  /** Registers `view` with the device; throws EINVAL for an overlap or memory the device cannot share. */
  register(view: ArrayBufferView, location: string): LocalBuffer {
    const where = `${this.label}: registerLocalMemory`;
    if (!ArrayBuffer.isView(view)) throw new WeftError('EINVAL', `${where}: expected a typed array or DataView, got ${describe(view)}`);
    if (view.byteLength < 1) throw new WeftError('EINVAL', `${where}: the view is empty`);
    if (typeof location !== 'string' || location.length === 0 || location.length > 64) throw new WeftError('EINVAL', `${where}: location must be a short string such as 'cpu:0', got ${describe(location)}`);
    const list = this.byBuffer.get(view.buffer);
    const start = view.byteOffset;
    const end = start + view.byteLength;
    const clash = list?.find((b) => b.start < end && start < b.end);
    if (clash) throw new WeftError('EINVAL', `${where}: bytes [${start}, ${end}) of this array overlap a registered buffer at [${clash.start}, ${clash.end}) (addr ${clash.addr}); unregister it first or register disjoint views`);
    let mr: MemoryRegion;
    try {
      mr = this.device.register(view);
    } catch (err) {
      throw new WeftError((err as WeftError).code ?? 'EINVAL', `${where}: ${(err as Error).message}. On shared memory, register arrays from ctx.alloc()`, { cause: err });
    }
    let window = this.windows.get(view.buffer);
    if (window === undefined) {
      window = this.nextAddress;
      this.nextAddress += Math.ceil((view.buffer.byteLength + 1) / WINDOW_ALIGN) * WINDOW_ALIGN;
      this.windows.set(view.buffer, window);
    }
    const buf = new LocalBuffer(new Uint8Array(view.buffer, start, view.byteLength), mr, window + start, location);
    if (list) list.push(buf);
    else this.byBuffer.set(view.buffer, [buf]);
    this.all.push(buf);
    return buf;
  }

  /** The registered buffer that `view` starts (same bytes, or a view starting where it starts). */
  registered(view: ArrayBufferView): LocalBuffer | undefined {
    if (!ArrayBuffer.isView(view)) return undefined;
    return this.byBuffer.get(view.buffer)?.find((b) => b.start === view.byteOffset);
  }

  /** Removes `buf` and deregisters its region (the caller checked that nothing is in flight). */
  unregister(buf: LocalBuffer): void {
    this.remove(buf);
    buf.mr.deregister();
  }

  /** Removes `buf` from the table; its region stays registered (the caller deregisters it later). */
  remove(buf: LocalBuffer): void {
    const list = this.byBuffer.get(buf.bytes.buffer);
    if (list) {
      list.splice(list.indexOf(buf), 1);
      if (list.length === 0) {
        this.byBuffer.delete(buf.bytes.buffer);
        // A later registration of that array starts a new list.
        this.lastBuffer = undefined;
      }
    }
    this.all.splice(this.all.indexOf(buf), 1);
  }

  /** The buffer holding `[byteOffset, byteOffset + length)` of `buffer`, or undefined. */
  find(buffer: ArrayBufferLike, byteOffset: number, length: number): LocalBuffer | undefined {
    // Requests mostly come from one array: its list is kept (a Map lookup costs more).
    let list = this.lastList;
    if (buffer !== this.lastBuffer) {
      const found = this.byBuffer.get(buffer);
      if (found === undefined) return undefined;
      this.lastBuffer = buffer;
      this.lastList = list = found;
    }
    for (let i = 0; i < list.length; i++) {
      const b = list[i];
      if (byteOffset >= b.start && byteOffset + length <= b.end) return b;
    }
    return undefined;
  }

  /** The buffer holding segment addresses `[addr, addr + length)` (for transfers to this rank's own segment). */
  findAddress(addr: number, length: number): LocalBuffer | undefined {
    for (const b of this.all) if (addr >= b.addr && addr + length <= b.addr + b.bytes.byteLength) return b;
    return undefined;
  }

  /** Forgets everything and leaves the regions registered (their keys may still be in use; the device closes them). */
  forget(): void {
    this.all.length = 0;
    this.byBuffer.clear();
    this.lastBuffer = undefined;
  }

  /** Deregisters everything (engine close). */
  clear(): void {
    for (const b of this.all) b.mr.deregister();
    this.all.length = 0;
    this.byBuffer.clear();
    this.lastBuffer = undefined;
  }
}

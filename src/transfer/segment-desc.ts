/**
 * The SegmentDesc of the transfer-engine note (seeds/transfer-engine-api.zh.md): what a rank
 * publishes in the job's store so that others can move data to and from its registered
 * memory, as JSON under `transfer/segment/<name>`. The note's fields (name, devices,
 * priority_matrix, buffers with name / addr / length / rkey) keep their names and shapes; weft
 * adds what its NIC needs (the rank, the host, each buffer's offset inside the region its key
 * names) and a version that grows with every update.
 *
 * The JSON comes from another process: `decodeSegmentDesc` checks every field and range, so a
 * malformed or hostile record is an EPROTO naming the key, never a bad access later.
 */
import { WeftError } from '../errors.js';

/** Store key of segment `name` (under the job's prefix). */
export function segmentKey(name: string): string {
  return `transfer/segment/${name}`;
}

/** The value of `protocol` in every descriptor weft writes. */
export const SEGMENT_PROTOCOL = 'weft-transfer/1';

/** A NIC of the segment's owner (the note's DeviceDesc; `gid` is the host id here). */
export interface DeviceDesc {
  name: string;
  /** The NIC layer's provider, e.g. 'shm', 'ofi:tcp;ofi_rxm', 'shm+ofi:tcp;ofi_rxm'. */
  provider: string;
  lid: number;
  gid: string;
}

/** One registered buffer (the note's BufferDesc). */
export interface BufferDesc {
  /** Its location, e.g. 'cpu:0' (the priority matrix's key). */
  name: string;
  /** Start in the segment's address space: a request's targetOffset is `addr + offset`. */
  addr: number;
  length: number;
  /** Per device: the NIC region descriptor (hex) a peer imports to access the buffer. */
  rkey: string[];
  /** Where the buffer starts inside the region its rkey names (0 when it is the region). */
  offset: number;
}

/** location -> [preferred device names, other usable device names] (the note's PriorityMatrix). */
export type PriorityMatrix = Record<string, [string[], string[]]>;

export interface SegmentDesc {
  protocol: string;
  /** Which engine wrote it: a re-opened engine's descriptors start a new version count. */
  instance: string;
  name: string;
  /** The rank that owns the segment, and its host. */
  rank: number;
  host: string;
  /** Grows with every update: a reader keeps the newer of two copies. */
  version: number;
  devices: DeviceDesc[];
  priority_matrix: PriorityMatrix;
  buffers: BufferDesc[];
}

const MAX_BUFFERS = 65_536;

/** JSON bytes of `desc`. */
export function encodeSegmentDesc(desc: SegmentDesc): Uint8Array {
  return new TextEncoder().encode(JSON.stringify(desc));
}

/**
 * Parses and checks a descriptor read from the store; throws EPROTO naming `key` and what is
 * wrong. Buffers come back sorted by address, and must not overlap.
 */
export function decodeSegmentDesc(bytes: Uint8Array, key: string): SegmentDesc {
  const bad = (why: string): never => {
    throw new WeftError('EPROTO', `the segment descriptor under '${key}' is malformed (${why}); is another program writing transfer/ keys under this job's prefix?`);
  };
  let v: unknown;
  try {
    v = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
  } catch (err) {
    return bad(`not JSON: ${(err as Error).message}`);
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return bad('not an object');
  const o = v as Record<string, unknown>;
  if (o.protocol !== SEGMENT_PROTOCOL) return bad(`protocol ${JSON.stringify(o.protocol)}, expected '${SEGMENT_PROTOCOL}'`);
  const str = (x: unknown, what: string): string => (typeof x === 'string' && x.length <= 4096 ? x : bad(`${what} is not a string`));
  const int = (x: unknown, what: string): number => (typeof x === 'number' && Number.isSafeInteger(x) && x >= 0 ? x : bad(`${what} is not a non-negative safe integer`));
  const instance = str(o.instance, 'instance');
  const name = str(o.name, 'name');
  const rank = int(o.rank, 'rank');
  const host = str(o.host, 'host');
  const version = int(o.version, 'version');
  if (!Array.isArray(o.devices) || o.devices.length < 1 || o.devices.length > 64) return bad('devices is not a list of 1 to 64 devices');
  const devices: DeviceDesc[] = o.devices.map((d: unknown, i: number) => {
    if (typeof d !== 'object' || d === null) return bad(`devices[${i}] is not an object`);
    const e = d as Record<string, unknown>;
    return { name: str(e.name, `devices[${i}].name`), provider: str(e.provider, `devices[${i}].provider`), lid: int(e.lid, `devices[${i}].lid`), gid: str(e.gid, `devices[${i}].gid`) };
  });
  const names = new Set(devices.map((d) => d.name));
  const pm = o.priority_matrix;
  if (typeof pm !== 'object' || pm === null || Array.isArray(pm)) return bad('priority_matrix is not an object');
  const priority: PriorityMatrix = {};
  for (const [loc, entry] of Object.entries(pm as Record<string, unknown>)) {
    if (loc.length > 64 || !Array.isArray(entry) || entry.length !== 2 || !entry.every((l) => Array.isArray(l) && l.length <= 64 && l.every((n) => typeof n === 'string' && names.has(n)))) {
      return bad(`priority_matrix['${loc.slice(0, 64)}'] is not [preferred, available] lists of this segment's device names`);
    }
    setOwn(priority, loc, [[...(entry[0] as string[])], [...(entry[1] as string[])]]);
  }
  if (!Array.isArray(o.buffers) || o.buffers.length > MAX_BUFFERS) return bad(`buffers is not a list of at most ${MAX_BUFFERS}`);
  const buffers: BufferDesc[] = o.buffers.map((b: unknown, i: number) => {
    if (typeof b !== 'object' || b === null) return bad(`buffers[${i}] is not an object`);
    const e = b as Record<string, unknown>;
    const addr = int(e.addr, `buffers[${i}].addr`);
    const length = int(e.length, `buffers[${i}].length`);
    if (length < 1 || !Number.isSafeInteger(addr + length)) return bad(`buffers[${i}] is empty or ends past 2^53`);
    const offset = int(e.offset, `buffers[${i}].offset`);
    // NIC regions are at most 4 GiB and addressed with 32-bit offsets.
    if (offset + length > 2 ** 32) return bad(`buffers[${i}] ends past 4 GiB in its region (offset ${offset}, length ${length})`);
    if (!Array.isArray(e.rkey) || e.rkey.length !== devices.length) return bad(`buffers[${i}].rkey does not hold one key per device`);
    const rkey = e.rkey.map((k: unknown, j: number) => {
      if (typeof k !== 'string' || k.length > 2048 || k.length % 2 !== 0 || !/^[0-9a-f]*$/.test(k)) return bad(`buffers[${i}].rkey[${j}] is not a hex string`);
      return k;
    });
    return { name: str(e.name, `buffers[${i}].name`), addr, length, rkey, offset };
  });
  buffers.sort((a, b) => a.addr - b.addr);
  for (let i = 1; i < buffers.length; i++) if (buffers[i].addr < buffers[i - 1].addr + buffers[i - 1].length) bad(`buffers at ${buffers[i - 1].addr} and ${buffers[i].addr} overlap`);
  return { protocol: SEGMENT_PROTOCOL, instance, name, rank, host, version, devices, priority_matrix: priority, buffers };
}

/** Bytes of a hex rkey. */
export function rkeyBytes(hex: string): Uint8Array {
  return new Uint8Array(Buffer.from(hex, 'hex'));
}

/** Hex of a region descriptor. */
export function rkeyHex(descriptor: Uint8Array): string {
  return Buffer.from(descriptor.buffer, descriptor.byteOffset, descriptor.byteLength).toString('hex');
}

/**
 * Sets an own property, whatever the key: a location from another process named `__proto__`
 * must not reach the object's prototype.
 */
export function setOwn<T>(o: Record<string, T>, key: string, value: T): void {
  Object.defineProperty(o, key, { value, enumerable: true, writable: true, configurable: true });
}

/**
 * The DLGRPCV1 segment, byte for byte as the design notes give it (docs/wire-format.md):
 * a 128-byte header, a 128-byte ring control (head and tail on separate cache lines),
 * `ring_depth` request slots of align_up(16 + reqBytes, 64) bytes, then `max_clients *
 * resp_depth` response slots of align_up(8 + respBytes, 64) bytes. weft adds what the notes
 * leave to the Rust types and to the operating system: the payload sizes and the offset of
 * an extension area in the header's padding, and after the response slots one 64-byte line
 * for the server and two per client (owner thread, call phase, futex doorbells), which is
 * what finding a dead client's hole and sleeping instead of spinning need.
 */
import { WeftError } from '../errors.js';
import { checkRange, checkSegmentBytes } from './header.js';
import { clearOwner } from './owner.js';
import { line } from './segment.js';

/** "DLGRPCV1" as the notes' u64 0x444C_4752_5043_5631, little-endian. */
export const MAGIC_LO = 0x5043_5631;
export const MAGIC_HI = 0x444c_4752;
export const VERSION = 1;

/** Byte offsets of the header and the ring control. */
export const H = {
  MAGIC: 0,
  VERSION: 8,
  MAX_CLIENTS: 12,
  RING_DEPTH: 16,
  RESP_DEPTH: 20,
  NEXT_CLIENT_ID: 24,
  SERVER_ALIVE: 28,
  // weft's fields in the header padding (29-127 in the notes):
  REQ_BYTES: 32,
  RESP_BYTES: 36,
  EXT_OFFSET: 40,
  TOTAL_BYTES: 44,
  HEAD: 128,
  TAIL: 192,
  RING: 256,
} as const;

/** Byte offsets inside a request slot and a response slot. */
export const SLOT = { COMMITTED: 0, CLIENT_ID: 4, RESP_SLOT: 8, PAYLOAD: 16 } as const;
export const RESP = { VALID: 0, PAYLOAD: 8 } as const;

/**
 * Int32 words of the server's line in the extension area (relative to its first word).
 * TAIL_EPOCH counts the times the tail crossed a multiple of TAIL_EPOCH positions: a client
 * that saw it unchanged knows its cached tail is less than that far behind, so comparing
 * 32-bit positions with the cached value is exact (section "delegationrpc" of wire-format.md).
 * FENCES is 1 when the server, going to sleep, fences every registered process
 * (host/remote-fence.ts): a registered client on x86 then commits with a plain store.
 */
export const SERVER = { STATE: 0, SLEEPING: 5, BELL: 6, TAIL_SLEEPING: 7, TAIL_BELL: 8, TAIL_EPOCH: 9, FENCES: 10 } as const;
/** Tail positions per TAIL_EPOCH step (2^30: far below the 2^32 of the positions' low word). */
export const TAIL_EPOCH = 1 << 30;
/**
 * Int32 words of a client's two lines (owner words 1-4: owner.ts). The call phase sits on
 * the second line: the client writes it on every call, the server reads the first line on
 * every reply, and the two must not share a cache line. FENCES is 1 while the id's owner
 * sleeps with a fence (it read SERVER.FENCES): only then may the server mark its responses
 * valid with plain stores (a weft that predates the fences leaves it 0, and is answered
 * with Atomics.store). Cleared whenever the id is released.
 */
export const CLIENT = { STATE: 0, SLEEPING: 5, BELL: 6, FENCES: 7, PHASE: 16, RESERVED_POS: 17 } as const;

/**
 * Clears what a client's record says of its owner (the owner words and FENCES) as its id is
 * released; the caller then stores the state.
 */
export function clearClientRecord(i32: Int32Array, base: number): void {
  i32[base + CLIENT.FENCES] = 0;
  clearOwner(i32, base);
}
/** Bytes of a client's record in the extension area. */
export const CLIENT_RECORD = 128;
/** A client between claiming its id and publishing its owner (the server leaves it be). */
export const CLIENT_CLAIMING = 5;

/** Client line states. */
export const CLIENT_FREE = 0;
export const CLIENT_ATTACHED = 1;
/** The server found its thread gone; freed once every request of it was answered. */
export const CLIENT_DEAD = 2;
/** Closed (or reaped) with nothing in flight: the id may be claimed again. */
export const CLIENT_RELEASED = 3;
/** Closed with responses still to come: released once the server has answered them. */
export const CLIENT_CLOSING = 4;

/**
 * Where a client is in a call, for the server's hole check: 0 outside a call, 1 between the
 * phase store and publishing its position (the fetch_add may have happened), 2 position
 * published in RESERVED_POS, 3 position abandoned (the call timed out waiting for space).
 */
export const PHASE_IDLE = 0;
export const PHASE_RESERVING = 1;
export const PHASE_RESERVED = 2;
export const PHASE_ABANDONED = 3;

/** What a ring is made of, fixed at creation. */
export interface DelegationGeometry {
  maxClients: number;
  ringDepth: number;
  respDepth: number;
  requestBytes: number;
  responseBytes: number;
}

/** Byte sizes and offsets that follow from a geometry. */
export interface DelegationLayout extends DelegationGeometry {
  reqSlot: number;
  respSlot: number;
  respArea: number;
  ext: number;
  total: number;
}

/** Checks a geometry (EINVAL naming the field from a caller, EPROTO from a segment's header). */
export function checkGeometry(g: DelegationGeometry, where: string, code: 'EINVAL' | 'EPROTO' = 'EINVAL'): void {
  checkRange(g.maxClients, 1, 1024, 'maxClients', where, false, code);
  checkRange(g.ringDepth, 2, 1 << 20, 'ringDepth', where, true, code);
  checkRange(g.respDepth, 1, 1 << 12, 'respDepth', where, true, code);
  checkRange(g.requestBytes, 0, 1 << 16, 'requestBytes', where, false, code);
  checkRange(g.responseBytes, 0, 1 << 16, 'responseBytes', where, false, code);
  const l = layoutOf(g);
  checkSegmentBytes(l.total, `ringDepth ${g.ringDepth} x ${l.reqSlot}-byte request slots and maxClients ${g.maxClients} x respDepth ${g.respDepth} x ${l.respSlot}-byte response slots`, where, code);
}

/** The layout of a (checked) geometry. */
export function layoutOf(g: DelegationGeometry): DelegationLayout {
  const reqSlot = line(SLOT.PAYLOAD + g.requestBytes);
  const respSlot = line(RESP.PAYLOAD + g.responseBytes);
  const respArea = H.RING + g.ringDepth * reqSlot;
  const ext = respArea + g.maxClients * g.respDepth * respSlot;
  const total = ext + 64 + g.maxClients * CLIENT_RECORD;
  return { ...g, reqSlot, respSlot, respArea, ext, total };
}

/** Writes a fresh header (the segment is zero-filled by the kernel). */
export function writeHeader(dv: DataView, l: DelegationLayout): void {
  dv.setUint32(H.MAGIC, MAGIC_LO, true);
  dv.setUint32(H.MAGIC + 4, MAGIC_HI, true);
  dv.setUint32(H.VERSION, VERSION, true);
  dv.setUint32(H.MAX_CLIENTS, l.maxClients, true);
  dv.setUint32(H.RING_DEPTH, l.ringDepth, true);
  dv.setUint32(H.RESP_DEPTH, l.respDepth, true);
  dv.setUint32(H.REQ_BYTES, l.requestBytes, true);
  dv.setUint32(H.RESP_BYTES, l.responseBytes, true);
  dv.setUint32(H.EXT_OFFSET, l.ext, true);
  dv.setUint32(H.TOTAL_BYTES, l.total, true);
}

/**
 * Reads and checks the header of a segment someone else made: EPROTO naming what is wrong
 * (magic, version, a size out of range, a segment shorter than its header says).
 */
export function readHeader(sab: SharedArrayBuffer, name: string): DelegationLayout {
  const where = `delegationrpc: segment ${name}`;
  if (sab.byteLength < H.RING) throw new WeftError('EPROTO', `${where} is ${sab.byteLength} bytes, shorter than the 256-byte header: not a delegationrpc ring`);
  const dv = new DataView(sab);
  const lo = dv.getUint32(H.MAGIC, true);
  const hi = dv.getUint32(H.MAGIC + 4, true);
  if (lo !== MAGIC_LO || hi !== MAGIC_HI) throw new WeftError('EPROTO', `${where}: bad magic 0x${hi.toString(16)}${lo.toString(16).padStart(8, '0')} (want 0x444c475250435631, "DLGRPCV1"): not a delegationrpc ring`);
  const version = dv.getUint32(H.VERSION, true);
  if (version !== VERSION) throw new WeftError('EPROTO', `${where}: version ${version}, this weft speaks version ${VERSION}: use the same weft on both sides`);
  const g: DelegationGeometry = {
    maxClients: dv.getUint32(H.MAX_CLIENTS, true),
    ringDepth: dv.getUint32(H.RING_DEPTH, true),
    respDepth: dv.getUint32(H.RESP_DEPTH, true),
    requestBytes: dv.getUint32(H.REQ_BYTES, true),
    responseBytes: dv.getUint32(H.RESP_BYTES, true),
  };
  checkGeometry(g, where, 'EPROTO');
  const l = layoutOf(g);
  if (dv.getUint32(H.EXT_OFFSET, true) !== l.ext || dv.getUint32(H.TOTAL_BYTES, true) !== l.total) throw new WeftError('EPROTO', `${where}: header sizes disagree with its geometry (corrupt header)`);
  if (sab.byteLength < l.total) throw new WeftError('EPROTO', `${where} is ${sab.byteLength} bytes, its header needs ${l.total}: truncated`);
  return l;
}

/** The word where client c's record (state, owner, bell, phase) starts. */
export function clientWord(l: DelegationLayout, c: number): number {
  return (l.ext + 64 + c * CLIENT_RECORD) >> 2;
}

/** Clients attached to the ring now (for the waiting loop: more busy threads than cores?). */
export function attachedClients(i32: Int32Array, l: DelegationLayout): number {
  let n = 0;
  for (let c = 0; c < l.maxClients; c++) if (Atomics.load(i32, clientWord(l, c) + CLIENT.STATE) === CLIENT_ATTACHED) n++;
  return n;
}

/**
 * The Flux segment (docs/wire-format.md): a 128-byte header ("WEFTFLX1"), one 64-byte line
 * per node (state, owner thread, doorbell), then for every ordered pair (i, j) a call ring
 * and a reply ring from i to j (stamped-ring.ts), `capacity` slots each.
 */
import { WeftError } from '../errors.js';
import { checkMagic, checkRange, checkSegmentBytes, writeMagic } from './header.js';
import { stampedSlotBytes } from './stamped-ring.js';

export const FLUX_MAGIC = 'WEFTFLX1';
/** 2: the fences word (a weft of version 1 would sleep without the fence plain stores need). */
export const FLUX_VERSION = 2;

export const FH = { NODES: 12, CAPACITY: 16, MAX_INFLIGHT: 20, PAYLOAD_BYTES: 24, TOTAL: 28, FENCES: 32, NODE_LINES: 128 } as const;
/** Int32 words of a node's line (owner words 1-4). */
export const FNODE = { STATE: 0, SLEEPING: 5, BELL: 6 } as const;
export const NODE_FREE = 0;
export const NODE_ATTACHED = 1;
export const NODE_CLOSED = 2;
/** Claimed, owner words being written: its callers wait as for a node not joined yet. */
export const NODE_JOINING = 3;

export interface FluxGeometry {
  nodes: number;
  capacity: number;
  maxInflight: number;
  payloadBytes: number;
}

export interface FluxLayout extends FluxGeometry {
  slot: number;
  rings: number;
  total: number;
}

export function checkFluxGeometry(g: FluxGeometry, where: string, code: 'EINVAL' | 'EPROTO' = 'EINVAL'): void {
  checkRange(g.nodes, 1, 256, 'nodes', where, false, code);
  checkRange(g.capacity, 1, 1 << 16, 'capacity', where, true, code);
  checkRange(g.maxInflight, 1, g.capacity, 'maxInflight', where, false, code);
  checkRange(g.payloadBytes, 0, 1 << 16, 'payloadBytes', where, false, code);
  const l = fluxLayoutOf(g);
  checkSegmentBytes(l.total, `nodes ${g.nodes} (${g.nodes} x ${g.nodes} pairs x 2 rings) x capacity ${g.capacity} x ${l.slot}-byte slots (payloadBytes ${g.payloadBytes})`, where, code);
}

export function fluxLayoutOf(g: FluxGeometry): FluxLayout {
  const slot = stampedSlotBytes(g.payloadBytes);
  const rings = FH.NODE_LINES + g.nodes * 64;
  return { ...g, slot, rings, total: rings + g.nodes * g.nodes * 2 * g.capacity * slot };
}

/** Byte offset of the ring from node i to node j: kind 0 carries calls, kind 1 replies. */
export function ringOffset(l: FluxLayout, from: number, to: number, kind: 0 | 1): number {
  return l.rings + ((from * l.nodes + to) * 2 + kind) * l.capacity * l.slot;
}

export function nodeLine(k: number): number {
  return (FH.NODE_LINES + k * 64) >> 2;
}

/** `fences`: every node's sleeps fence with membarrier (host/remote-fence.ts), so publishers may use plain stores. */
export function writeFluxHeader(dv: DataView, l: FluxLayout, fences: boolean): void {
  writeMagic(dv, FLUX_MAGIC, FLUX_VERSION);
  dv.setUint32(FH.NODES, l.nodes, true);
  dv.setUint32(FH.CAPACITY, l.capacity, true);
  dv.setUint32(FH.MAX_INFLIGHT, l.maxInflight, true);
  dv.setUint32(FH.PAYLOAD_BYTES, l.payloadBytes, true);
  dv.setUint32(FH.TOTAL, l.total, true);
  dv.setUint32(FH.FENCES, fences ? 1 : 0, true);
}

export function readFluxHeader(sab: SharedArrayBuffer, name: string): FluxLayout {
  const where = `Flux: segment ${name}`;
  const dv = checkMagic(sab, name, 'Flux', FLUX_MAGIC, FLUX_VERSION, FH.NODE_LINES);
  const g: FluxGeometry = { nodes: dv.getUint32(FH.NODES, true), capacity: dv.getUint32(FH.CAPACITY, true), maxInflight: dv.getUint32(FH.MAX_INFLIGHT, true), payloadBytes: dv.getUint32(FH.PAYLOAD_BYTES, true) };
  checkFluxGeometry(g, where, 'EPROTO');
  const l = fluxLayoutOf(g);
  if (dv.getUint32(FH.TOTAL, true) !== l.total || sab.byteLength < l.total) throw new WeftError('EPROTO', `${where}: header says ${dv.getUint32(FH.TOTAL, true)} bytes, its geometry needs ${l.total} and the segment has ${sab.byteLength}`);
  return l;
}

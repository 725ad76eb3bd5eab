/**
 * A collective's signature travels in every chunk header, so a rank that called a different
 * collective, dtype, op or root than its peer is told so instead of hanging or mixing bytes.
 * Layout (u32): collective << 24 | dtype << 16 | op << 8 | root (mod 256). 0 = point to point.
 * The dtype and op fields are the reduction codes of reduce/codes.ts plus one (0: none), so
 * the two tables can never drift apart (docs/wire-format.md#signature).
 */
import { REDUCE_DTYPES, REDUCE_OPS, dtypeCode, opCode, type DType, type ReduceOp } from '../reduce/codes.js';

export const COLLECTIVES = ['p2p', 'allreduce', 'reduce_scatter', 'allgather', 'allgatherv', 'broadcast', 'reduce', 'gather', 'gatherv', 'scatter', 'alltoall', 'alltoallv', 'barrier', 'bound', 'check'] as const;
export type CollectiveName = (typeof COLLECTIVES)[number];

/** The dtype field of raw bytes (bound buffers), after every reduction dtype. */
const BYTES_FIELD = REDUCE_DTYPES.length + 1;

function dtypeField(dtype: DType | 'bytes' | undefined): number {
  if (dtype === undefined) return 0;
  if (dtype === 'bytes') return BYTES_FIELD;
  return (dtypeCode(dtype) ?? -1) + 1;
}

function dtypeOfField(f: number): string {
  if (f === 0) return 'none';
  if (f === BYTES_FIELD) return 'bytes';
  return REDUCE_DTYPES[f - 1] ?? '?';
}

export function signature(collective: CollectiveName, dtype?: DType | 'bytes', op?: ReduceOp, root = 0): number {
  const c = COLLECTIVES.indexOf(collective);
  const o = op === undefined ? 0 : (opCode(op) ?? -1) + 1;
  return ((c << 24) | (dtypeField(dtype) << 16) | (o << 8) | (root & 0xff)) >>> 0;
}

/** "allreduce(float32, sum)" or "broadcast(int32, root 2)". */
export function describeSignature(sig: number): string {
  const c = COLLECTIVES[sig >>> 24] ?? `collective ${sig >>> 24}`;
  const d = dtypeOfField((sig >>> 16) & 0xff);
  const of = (sig >>> 8) & 0xff;
  const o = of === 0 ? 'none' : (REDUCE_OPS[of - 1] ?? '?');
  const parts = [d !== 'none' ? d : '', o !== 'none' ? o : '', /^(broadcast|reduce|gather|gatherv|scatter)$/.test(c) ? `root ${sig & 0xff}` : ''].filter(Boolean);
  return `${c}(${parts.join(', ')})`;
}

/** Slot of a collective: its own namespace per collective and tag, so tags never collide. */
export function collectiveSlot(collective: CollectiveName, tag: number): number {
  return COLLECTIVES.indexOf(collective) * 2 ** 32 + (tag >>> 0);
}

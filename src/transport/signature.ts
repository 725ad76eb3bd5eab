/**
 * A collective's signature travels in every chunk header, so a rank that called a different
 * collective, dtype, op or root than its peer is told so instead of hanging or mixing bytes.
 * Layout (u32): collective << 24 | dtype << 16 | op << 8 | root (mod 256). 0 = point to point.
 */
export const COLLECTIVES = ['p2p', 'allreduce', 'reduce_scatter', 'allgather', 'allgatherv', 'broadcast', 'reduce', 'gather', 'gatherv', 'scatter', 'alltoall', 'alltoallv', 'barrier', 'bound'] as const;
export type CollectiveName = (typeof COLLECTIVES)[number];

const DTYPES = ['none', 'float32', 'float64', 'int8', 'uint8', 'int16', 'uint16', 'int32', 'uint32', 'int64', 'uint64', 'float16', 'bfloat16', 'bytes'];
const OPS = ['none', 'sum', 'prod', 'min', 'max', 'band', 'bor', 'bxor'];

export function signature(collective: CollectiveName, dtype = 'none', op = 'none', root = 0): number {
  const c = COLLECTIVES.indexOf(collective);
  const d = Math.max(0, DTYPES.indexOf(dtype));
  const o = Math.max(0, OPS.indexOf(op));
  return ((c << 24) | (d << 16) | (o << 8) | (root & 0xff)) >>> 0;
}

/** "allreduce(float32, sum)" or "broadcast(int32, root 2)". */
export function describeSignature(sig: number): string {
  const c = COLLECTIVES[sig >>> 24] ?? `collective ${sig >>> 24}`;
  const d = DTYPES[(sig >>> 16) & 0xff] ?? '?';
  const o = OPS[(sig >>> 8) & 0xff] ?? '?';
  const parts = [d !== 'none' ? d : '', o !== 'none' ? o : '', /^(broadcast|reduce|gather|gatherv|scatter)$/.test(c) ? `root ${sig & 0xff}` : ''].filter(Boolean);
  return `${c}(${parts.join(', ')})`;
}

/** Slot of a collective: its own namespace per collective and tag, so tags never collide. */
export function collectiveSlot(collective: CollectiveName, tag: number): number {
  return COLLECTIVES.indexOf(collective) * 2 ** 32 + (tag >>> 0);
}

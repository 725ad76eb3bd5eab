/**
 * Layout of a shm device's control segment, in 32-bit words. Peers map it to reserve slots
 * in its completion ring, read its receive-credit grants and memory-region table, and ring its
 * doorbell. Hot words written by different sides sit on separate 64-byte lines.
 * See docs/wire-format.md ("shm control segment").
 */

/** 'WFTC' little-endian. */
export const CTL_MAGIC = 0x43544657;
export const CTL_VERSION = 1;

export const MAX_QPS = 1024;
export const MAX_MRS = 4096;
export const DEFAULT_CQ_DEPTH = 16384;

// Header line (written once by the owner).
export const H_MAGIC = 0;
export const H_VERSION = 1;
export const H_PID = 2;
export const H_CQ_DEPTH = 3;
export const H_MAX_QPS = 4;
export const H_MAX_MRS = 5;
/** Random id of the device instance, so descriptors cannot be replayed against a newer one. */
export const H_NONCE = 6;

/** Producers' fetch-add slot counter of the completion ring. */
export const CQ_TAIL = 16;
/** Consumer position (diagnostics only: credits already keep producers in bounds). */
export const CQ_HEAD = 32;
/** Futex word producers bump to wake a sleeping owner. */
export const DOORBELL = 48;
/** Nonzero while the owner sleeps (or is about to) on DOORBELL. */
export const SLEEPING = 49;

/** Per QP: 0 free, 1 open, 2 closed. */
export const QP_STATE = 64;
/** Per QP: cumulative receive credits granted to the peer (wrapping int32). */
export const QP_GRANTED = QP_STATE + MAX_QPS;
/** Per QP: the peer is blocked on credits and wants its doorbell rung on the next grant. */
export const QP_WAITER = QP_GRANTED + MAX_QPS;

/** Memory-region table: MAX_MRS entries of [key, segment id, byte offset, byte length]. */
export const MR_TABLE = QP_WAITER + MAX_QPS;
export const MR_WORDS = 4;

/** Completion ring: depth entries of [seq, qpn, imm, byteLength]; seq = position + 1 once committed. */
export const CQ_RING = MR_TABLE + MAX_MRS * MR_WORDS;
export const CQE_WORDS = 4;

export const QP_OPEN = 1;
export const QP_CLOSED = 2;

/** Bytes of a control segment whose ring has `cqDepth` entries. */
export function controlBytes(cqDepth: number): number {
  return (CQ_RING + cqDepth * CQE_WORDS) * 4;
}

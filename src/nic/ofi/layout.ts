/**
 * Constants shared by the ofi provider's files: the native command and completion word
 * layouts (native/ofi.cc), the per-device control region, the operation-context encoding and
 * the 64-bit remote CQ data of a WRITE_IMM. Wire layouts: docs/wire-format.md.
 */

// Native command words (16 u32 per command; keep in sync with kCmd* in native/ofi.cc).
export const CMD_OP = 0;
export const CMD_ADDR = 1;
export const CMD_MR = 2;
export const CMD_OFF = 3;
export const CMD_LEN = 4;
export const CMD_RADDR = 5;
export const CMD_KEY = 7;
export const CMD_DATA = 9;
export const CMD_CTX = 11;
export const CMD_RESULT = 15;
export const CMD_WORDS = 16;
/** Native opcodes of a command. */
export const NOP_WRITE = 1;
export const NOP_WRITEDATA = 2;
export const NOP_READ = 3;

// Native completion words (8 u32 per entry; kOut* in native/ofi.cc).
export const OUT_KIND = 0;
export const OUT_CTX = 1;
export const OUT_LEN = 3;
export const OUT_DATA = 4;
export const OUT_SRC = 6;
export const OUT_AUX = 7;
export const OUT_WORDS = 8;
export const KIND_LOCAL = 1;
export const KIND_REMOTE_WRITE = 2;
export const KIND_ERROR = 3;

/**
 * Context of a posted operation (64 bits, handed back in its completion). High word:
 * bits 0-9 local QP number, 10-11 kind, 12-31 QP generation (a completion for a closed
 * QP whose number was reused is recognised and dropped). Low word: the QP's op sequence.
 */
export const CTX_USER = 0;
export const CTX_GRANT = 1;
export const CTX_VERIFY = 2;
export const CTX_BIGLEN = 3;
export function ctxHi(qpn: number, kind: number, gen: number): number {
  return (qpn | (kind << 10) | ((gen & 0xfffff) << 12)) >>> 0;
}

/** QPs per device (10 bits of the context and of the remote CQ data). */
export const MAX_QPS = 1024;
/** Memory regions per device (entries of the control region's MR table). */
export const MAX_MRS = 1024;
/** Operations one QP may have between post and retirement (its in-flight ring). */
export const RING = 1024;

/**
 * Remote CQ data of a WRITE_IMM (cq_data_size 8): low word the user's immediate, high word
 * `(lengthField << 10) | targetQpn`. tcp reports no length for remote writes, so the length
 * travels here; lengths of LEN_ESCAPE or more send LEN_ESCAPE and the true length by a
 * preceding internal WRITE into the target's BIGLEN_IN word (one such write outstanding per
 * QP, acknowledged through the grant record, so the word is never overwritten unread).
 */
export const LEN_ESCAPE = 0x3fffff;

/**
 * The control region every device registers; peers learn its address and key from the QP
 * address blob. Byte offsets:
 *   GRANT_IN   [MAX_QPS x {granted u32, bigConsumed u32}]  written by each QP's peer
 *   GRANT_OUT  same, source of our grant writes
 *   BIGLEN_IN  [MAX_QPS x u32]  true length of the current big WRITE_IMM, written by the peer
 *   BIGLEN_OUT [MAX_QPS x u32]  source of our biglen writes
 *   VERIFY     [MAX_QPS x 32 B] landing area of MR-table reads (one per QP at a time)
 *   MR_TABLE   [MAX_MRS x 32 B] {gen u32, length u32, addr u64, key u64, 0 u64}, read by peers
 */
export const GRANT_IN = 64;
export const GRANT_OUT = GRANT_IN + MAX_QPS * 8;
export const BIGLEN_IN = GRANT_OUT + MAX_QPS * 8;
export const BIGLEN_OUT = BIGLEN_IN + MAX_QPS * 4;
export const VERIFY = BIGLEN_OUT + MAX_QPS * 4;
export const MR_TABLE = VERIFY + MAX_QPS * 32;
export const MR_ENTRY = 32;
export const CTL_BYTES = MR_TABLE + MAX_MRS * MR_ENTRY;

/** libfabric FI_ORDER_* bits the QP fences around when the provider does not keep them. */
export const FI_ORDER_RAR = 1;
export const FI_ORDER_RAW = 2;
export const FI_ORDER_WAR = 8;
export const FI_ORDER_WAW = 16;

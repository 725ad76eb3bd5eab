/**
 * Byte layout of the transport's per-pair message rings (docs/wire-format.md, "Transport
 * rings"). Every rank owns one inbox region holding a ring per peer; a peer writes its
 * messages, split into chunks, into slots of its ring there, and rings the receiver with a
 * WRITE_IMM whose immediate says what kind of event it is.
 */

/** Bytes of the header in front of every chunk's payload (64 keeps payloads cache-aligned). */
export const HEADER_BYTES = 64;

/** u32 word indexes of the chunk header. */
export const H = {
  MAGIC: 0,
  /** Chunk sequence number on this pair (checks that chunks arrive in order). */
  SEQ: 1,
  SLOT_LO: 2,
  SLOT_HI: 3,
  /** Bytes of the whole message. */
  TOTAL: 4,
  /** Offset of this chunk in the message. */
  OFFSET: 5,
  /** Payload bytes of this chunk. */
  LENGTH: 6,
  /** Bound buffers: where the message lands in the receiver's buffer. */
  ROFFSET: 7,
  /** Collective signature (0 for point to point): see signature.ts. */
  SIG: 8,
  FLAGS: 9,
  /**
   * Which call of its slot (collective and tag) the message belongs to, counted by every rank
   * from 1: a message of an earlier or later call than the receive's is a mismatch (a rank
   * that took another root, or whose call failed, left it behind). 0 for point to point.
   */
  CALL: 10,
  /**
   * With FLAG_CREDIT: the sender's count of chunks it has consumed from the receiver (mod
   * 2^32), the credit a KIND_CREDIT would carry, riding on data that goes back anyway.
   */
  ACK: 11,
} as const;

/**
 * 'WTM3' little-endian. The number changes with the header's meaning, so a rank of another
 * weft version fails at its first chunk with EPROTO instead of misreading it. 'WTM1' had no
 * credit in word 11: such a peer never returned credits its chunks now carry, and both sides
 * waited out their timeouts. 'WTM2' had flag 2 (return credits at once), which a zero-copy
 * send waited for; a WTM3 receiver never sends it early, so that sender would wait too.
 */
export const CHUNK_MAGIC = 0x334d5457;

/** Header flag: the message is for a bound buffer (lands at ROFFSET). Flag 2 is retired (WTM2). */
export const FLAG_BOUND = 1;
/** Header flag: ACK holds the sender's consumed count (frees ring slots at the receiver). */
export const FLAG_CREDIT = 4;

/** Immediate data: the top two bits say what the WRITE_IMM means. */
export const KIND_SHIFT = 30;
export const KIND_MASK = 0x3fffffff;
/** A chunk landed in the next slot of the sender's ring. */
export const KIND_DATA = 0;
/** Low 30 bits: chunks the receiver has consumed (mod 2^30); frees ring slots at the sender. */
export const KIND_CREDIT = 1;
/** The sender aborted the job; the reason (UTF-8) is in the ring's reserved last slot. */
export const KIND_ABORT = 2;

/** Shape of one pair's ring. */
export interface RingGeometry {
  /** Payload bytes per slot (a multiple of 64). */
  readonly chunkBytes: number;
  /** Data slots; one more slot is reserved for the abort message. */
  readonly slots: number;
  /** HEADER_BYTES + chunkBytes. */
  readonly stride: number;
  /** (slots + 1) * stride. */
  readonly ringBytes: number;
}

export function ringGeometry(chunkBytes: number, slots: number): RingGeometry {
  const stride = HEADER_BYTES + chunkBytes;
  return { chunkBytes, slots, stride, ringBytes: (slots + 1) * stride };
}

/** Bytes of each rank's board (see board.ts): two buffers for small intra-host collectives. */
export const BOARD_BUFFER_BYTES = 64 * 1024;
export const BOARD_HEADER_BYTES = 256;
export const BOARD_BYTES = BOARD_HEADER_BYTES + 2 * BOARD_BUFFER_BYTES;

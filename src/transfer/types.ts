/**
 * The transfer engine's public vocabulary, after the note's TransferRequest, TaskStatus and
 * TransferStatus (seeds/transfer-engine-api.zh.md).
 */

/** A segment opened with `openSegment` (the note's SegmentID). */
export type SegmentID = number;
/** A batch from `allocateBatchID` (the note's BatchID). */
export type BatchID = number;

/**
 * One contiguous move (the note's TransferRequest). READ copies the target's
 * `[targetOffset, targetOffset + length)` into `source`; WRITE copies `source` there.
 * `source` is a view inside memory registered with `registerLocalMemory`; its first `length`
 * bytes move (`length` defaults to its byteLength). `targetOffset` is an address in the
 * target segment: a buffer's `addr` from its descriptor plus an offset.
 */
export interface TransferRequest {
  opcode: 'READ' | 'WRITE';
  source: ArrayBufferView;
  targetId: SegmentID;
  targetOffset: number;
  length?: number;
}

/** The note's TaskStatus (CANCELED is not supported, as there). */
export type TaskStatus = 'WAITING' | 'PENDING' | 'INVALID' | 'COMPLETED' | 'TIMEOUT' | 'FAILED';

/** Numeric task states (index into TASK_STATUS). */
export const Task = {
  /** Moving: some slices are posted. */
  WAITING: 0,
  /** Accepted, nothing posted yet (its segment's descriptor is being refreshed, or the paths are busy). */
  PENDING: 1,
  /** Refused at submit (the reason says why); nothing moved. */
  INVALID: 2,
  COMPLETED: 4,
  /** Not done within the batch's timeout. */
  TIMEOUT: 5,
  /** A slice failed on every path (the reason names the last error). */
  FAILED: 6,
} as const;

/** Names by Task value; 3 is the note's CANCELED, which no request ever takes. */
export const TASK_STATUS: readonly TaskStatus[] = ['WAITING', 'PENDING', 'INVALID', 'FAILED', 'COMPLETED', 'TIMEOUT', 'FAILED'];

/** One request's state (the note's TransferStatus, plus why it did not complete). */
export interface TransferStatus {
  status: TaskStatus;
  /** Bytes moved so far: a lower bound until COMPLETED, then the length. */
  transferred: number;
  /** For INVALID, TIMEOUT and FAILED: what went wrong and what to do. */
  reason?: string;
}

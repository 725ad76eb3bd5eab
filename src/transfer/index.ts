/**
 * The transfer engine (`weftjs/transfer`): Mooncake-style segments and batched one-sided
 * READ / WRITE over the NIC layer, on one host and across hosts (docs/transfer.md).
 *
 * @example
 * import { init } from 'weftjs';
 * const ctx = await init();
 * const engine = await ctx.transfer();                 // collective: every rank opens its engine
 * const buf = ctx.alloc(Uint8Array, 1 << 24);
 * await engine.registerLocalMemory(buf);
 * await ctx.barrier();
 * const peer = await engine.openSegment(engine.segmentNames[(ctx.rank + 1) % ctx.size]);
 * const target = engine.getSegmentDesc(peer).buffers[0];
 * const batch = engine.allocateBatchID(16);
 * engine.submitTransfer(batch, [{ opcode: 'WRITE', source: buf.subarray(0, 65536), targetId: peer, targetOffset: target.addr }]);
 * await engine.waitBatch(batch);
 * engine.freeBatchID(batch);
 */
export { TransferEngine, type TransferEngineOptions, type BatchOptions, type TransferStats } from './engine.js';
export { Task, TASK_STATUS, type BatchID, type SegmentID, type TaskStatus, type TransferRequest, type TransferStatus } from './types.js';
export { decodeSegmentDesc, encodeSegmentDesc, segmentKey, SEGMENT_PROTOCOL, type SegmentDesc, type BufferDesc, type DeviceDesc, type PriorityMatrix } from './segment-desc.js';
export type { TransferGroup } from './paths.js';

/**
 * copyrpc: batched WRITE-with-immediate RPC with credit flow control over the NIC layer
 * (docs/rpc.md). Low level: Endpoint.call + RpcEngine.poll / recv / RecvHandle.reply, no
 * allocation per call. Convenience: `await ep.request(bytes)` and `rpc.serve(handler)`.
 * In a job, `ctx.rpc()` gives the engine on the job's device; alone, `createRpcEngine`.
 *
 * @example
 * import { createRpcEngine } from 'weftjs/rpc';
 * const rpc = await createRpcEngine({ provider: 'shm', label: 'rank 0' });
 * const ep = rpc.createEndpoint({ peerLabel: 'rank 1' });
 * // exchange ep.localInfo() with the peer, then:
 * ep.connect(peerInfo);
 * const reply = await ep.request(new TextEncoder().encode('ping'), { timeoutMs: 5000 });
 */
export * from './constants.js';
export { RpcEngine, createRpcEngine, type RpcEngineOptions, type CreateRpcEngineOptions, type ResponseHandler, type CallFailedHandler } from './engine.js';
export { Endpoint, type EndpointOptions, type EndpointStats } from './endpoint.js';
export { RecvHandle } from './recv-handle.js';
export { type RequestOptions, type ServeHandler, type ServeOptions, type Server } from './driver.js';
export { connectRpcMesh, type RpcMeshOptions } from './mesh.js';
export { encodeEndpointInfo, decodeEndpointInfo, writeFlowMetadata, writeHeader, readU64, writeU64, type EndpointInfo } from './wire.js';
export {
  PollController,
  NoPollControl,
  FixedPollBudget,
  AdaptivePollBudget,
  AdaptiveBatchHold,
  AdaptiveMinBatch,
  createPollController,
  ADAPTIVE_DEFAULTS,
  BATCH_HOLD_DEFAULTS,
  MIN_BATCH_DEFAULTS,
  POLL_CONTROLLER_SPECS,
  type PollControllerKind,
  type PollControllerOptions,
} from './poll-control.js';

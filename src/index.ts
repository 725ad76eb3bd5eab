/**
 * weft: collective communication and RDMA-style RPC for Node.js.
 *
 * @example
 * import { init } from 'weftjs';
 * const ctx = await init();              // rank, size and store from `weft run` or the env
 * const x = new Float32Array(4).fill(ctx.rank);
 * await ctx.allreduce(x);                 // on every rank: 0 + 1 + ... + (size-1)
 * await ctx.close();
 */
export { WeftError, type WeftErrorCode } from './errors.js';
export { PollBackoff } from './host/wait.js';
export type { WaitOptions } from './util/deadline.js';
export * from './nic/index.js';
export * from './rendezvous/index.js';
export { init, ProcessGroup, type InitOptions } from './job/process-group.js';
export { Subgroup, type GroupOptions } from './job/communicator.js';
export { HostMap, type RankHost } from './rendezvous/hosts.js';
export { connect } from './job/bootstrap.js';
export { JobMember, type JobParts } from './job/member.js';
export * from './collectives/index.js';
export { Device as TransportDevice, Pair, SendBuffer, RecvBuffer, createSendBuffer, createRecvBuffer, UnboundBuffer, type TransportOptions } from './transport/index.js';
export * from './reduce/index.js';
export { rankFromEnv, type RankInfo, type EnvStyle } from './rendezvous/env.js';

/** Collectives over a Group (a connected ProcessGroup): Promise and blocking variants of each. */
export type { Group, CollectiveOptions } from './call.js';
export { refused } from './call.js';
export { allreduce, allreduceSync, DIRECT_MAX_BYTES, type AllreduceOptions, type AllreduceAlgorithm } from './allreduce.js';
export { reduceScatter, reduceScatterSync, type ReduceScatterOptions } from './reduce-scatter.js';
export { allgather, allgatherSync, allgatherv, allgathervSync } from './allgather.js';
export { broadcast, broadcastSync, type RootOptions } from './broadcast.js';
export { reduce, reduceSync, type ReduceOptions } from './reduce.js';
export { gather, gatherSync, gatherv, gathervSync, scatter, scatterSync } from './gather.js';
export { alltoall, alltoallSync, alltoallv, alltoallvSync } from './alltoall.js';
export { barrier, barrierSync } from './barrier.js';
export { send, recv, isend, irecv, sendSync, recvSync, Request } from './p2p.js';
export { checkAllreduce } from './allreduce.js';
export * from './hierarchical.js';

/**
 * `weftjs/delegation`: request aggregation between threads and processes of one host
 * through shared memory. Three parts, as in the design notes:
 * - delegationrpc (DelegationServer, DelegationClient): many clients, one shared MPSC ring;
 * - ipc (IpcServer, IpcClient): a request and a response SPSC ring per client, drained by
 *   flat combining;
 * - Flux: SPSC channels among K daemons, calls and replies with tokens.
 * Everything lives in /dev/shm segments (0600, named per job, swept when their creator is
 * gone) and works the same between worker_threads and between processes.
 */
export { DelegationServer, type DelegationServerOptions, type DelegationServerStats, type RecvEntry } from './delegation-server.js';
export { DelegationClient, type DelegationClientOptions, type ResponseHandler } from './delegation-client.js';
export type { DelegationGeometry, DelegationLayout } from './delegation-layout.js';
export { ServerDisconnected } from './errors.js';
export { IpcServer, type IpcServerOptions, type IpcRequest } from './ipc-server.js';
export { IpcClient, type IpcClientOptions } from './ipc-client.js';
export type { IpcGeometry, IpcLayout } from './ipc-layout.js';
export { FluxNode, type FluxOptions, type FluxRequest } from './flux.js';
export type { FluxGeometry, FluxLayout } from './flux-layout.js';

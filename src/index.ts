/**
 * weft: collective communication and RDMA-style RPC for Node.js.
 *
 * @example
 * import { init } from 'weft';
 * const ctx = await init();              // rank, size and store from `weft run` or the env
 * console.log(`rank ${ctx.rank} of ${ctx.size}`);
 * await ctx.close();
 */
export { WeftError, type WeftErrorCode } from './errors.js';
export type { WaitOptions } from './util/deadline.js';
export * from './nic/index.js';
export * from './rendezvous/index.js';
export * from './reduce/index.js';
export { init, Context, type InitOptions } from './rendezvous/context.js';
export { rankFromEnv, type RankInfo, type EnvStyle } from './rendezvous/env.js';

// A rank for the pinning test: reports the cores its thread may run on (after init pinned it)
// and whether its device takes the host for oversubscribed.
import { readFileSync } from 'node:fs';
import { init } from '../../../dist/src/index.js';

const ctx = await init({ timeoutMs: 20_000 });
const allowed = /Cpus_allowed_list:\s*(\S+)/.exec(readFileSync('/proc/thread-self/status', 'utf8'))?.[1];
console.log(`placement rank ${ctx.rank} cpus ${allowed} oversubscribed ${ctx.transport.device.oversubscribed}`);
await ctx.close();

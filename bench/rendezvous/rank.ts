/** One rank of `weft bench rendezvous`: times init() (store + device + full mesh) and counts store traffic. */
import { init } from '../../src/index.js';

const t0 = Date.now();
const ctx = await init({ timeoutMs: 60_000 });
const connected = Date.now();
const stats = { ...ctx.store.stats };
const launcherT0 = Number(process.env.WEFT_BENCH_T0 ?? t0);
console.log(`BENCH ${JSON.stringify({ rank: ctx.rank, init_ms: connected - t0, since_launch_ms: connected - launcherT0, commands: stats.commands, round_trips: stats.roundTrips })}`);
await ctx.close();

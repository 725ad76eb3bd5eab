// Run with: npx weft run -n 4 examples/allreduce.ts
import { init } from 'weftjs';

const ctx = await init();
const { rank, size } = ctx;

// In place: every rank ends with the sum over ranks.
const x = new Float32Array(1 << 20).map((_, i) => rank + i);
await ctx.allreduce(x);
const expect0 = (size * (size - 1)) / 2;
if (x[0] !== expect0 || x[5] !== expect0 + 5 * size) throw new Error(`rank ${rank}: wrong result ${x[0]}, ${x[5]}`);

// Out of place, another op, and the blocking variant for tight loops.
const mx = ctx.allreduceSync(Int32Array.of(rank * 10), { op: 'max', output: new Int32Array(1) });

// Timing a few small allreduces.
const t = new Float64Array(1);
const t0 = performance.now();
for (let i = 0; i < 1000; i++) ctx.allreduceSync(t);
const us = ((performance.now() - t0) * 1000) / 1000;

await ctx.barrier();
if (rank === 0) console.log(`${size} ranks: sum ok (x[0] = ${x[0]}), max = ${mx[0]}, 8-byte allreduceSync ${us.toFixed(2)} us`);
await ctx.close();

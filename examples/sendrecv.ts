// Run with: npx weft run -n 3 examples/sendrecv.ts
// A token goes around the ring with tagged send/recv; then every rank reports to rank 0,
// which receives from whichever rank is ready first.
import { init } from 'weftjs';

const ctx = await init();
const { rank, size } = ctx;
const right = (rank + 1) % size;
const left = (rank + size - 1) % size;

const token = new Float64Array(1);
if (rank === 0) {
  token[0] = 1;
  await ctx.send(token, right, { tag: 1 });
  await ctx.recv(token, left, { tag: 1 });
  console.log(`token came back after ${size} hops: ${token[0]}`);
} else {
  await ctx.recv(token, left, { tag: 1 });
  token[0] *= 2;
  await ctx.send(token, right, { tag: 1 });
}

// Receive-from-any: rank 0 takes reports in arrival order; irecv/isend overlap with other work.
if (rank === 0) {
  for (let k = 1; k < size; k++) {
    const report = new Int32Array(2);
    const from = await ctx.recv(report, undefined, { tag: 2 });
    console.log(`report from rank ${from}: pid ${report[1]}`);
  }
} else {
  const req = ctx.isend(Int32Array.of(rank, process.pid), 0, { tag: 2 });
  await req.wait();
}
await ctx.close();

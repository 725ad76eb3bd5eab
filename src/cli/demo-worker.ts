/**
 * One rank of `weft demo`, started by `weft run`: joins the job through the launcher's
 * embedded TcpStore (init), then a token ring for latency, a one-sided READ of the left
 * neighbor's greeting, and every rank streaming 1 MiB writes to its right neighbor at once.
 * Rank 0 gathers everybody's numbers through the store and prints the summary.
 */
import { CompletionBatch, Opcode, Status } from '../nic/index.js';
import { init } from '../job/process-group.js';

const args = { laps: Number(process.argv[2] ?? 2000), blocks: Number(process.argv[3] ?? 256) };
const batch = new CompletionBatch(256);

const BLOCK = 1 << 20;
const SLOTS = 4;

interface RankReport {
  rank: number;
  pid: number;
  hopUs: number;
  heard: string;
  gbps: number;
  received: number;
}

async function main(): Promise<void> {
  const ctx = await init({ timeoutMs: 30_000 });
  const { rank, size: n, device, pairs, store } = ctx;
  const inbox = device.allocate(SLOTS * BLOCK);
  const outbox = device.allocate(BLOCK);
  const right = (rank + 1) % n;
  const left = (rank + n - 1) % n;
  // Region descriptors go through the store, like any rendezvous data.
  await store.multiSet([
    [`demo/in/${rank}`, inbox.descriptor()],
    [`demo/out/${rank}`, outbox.descriptor()],
  ]);
  const [rightIn, leftOut] = await store.multiGet([`demo/in/${right}`, `demo/out/${left}`], { timeoutMs: 30_000 });
  const toRight = pairs[right]!;
  const remoteIn = toRight.importRegion(rightIn);
  const remoteOut = pairs[left]!.importRegion(leftOut);
  const cq = device.cq;
  const greeting = `hello from rank ${rank} (pid ${process.pid})`;
  outbox.bytes.set(Buffer.from(greeting.padEnd(64)), 0);

  // Stage-3 blocks from a faster left neighbor may arrive during earlier stages: count them always.
  let received = 0;
  const isBlock = (i: number) => batch.opcode[i] === Opcode.RECV_WRITE_IMM && batch.imm[i] >= 1_000_000;
  const waitFor = async (pred: (i: number) => boolean, done: () => boolean = () => false): Promise<void> => {
    for (;;) {
      const k = cq.poll(batch);
      let hit = false;
      for (let i = 0; i < k; i++) {
        if (batch.status[i] !== Status.SUCCESS) throw new Error(batch.errors[i]?.message);
        if (isBlock(i)) received++;
        else if (pred(i)) hit = true;
      }
      if (hit || done()) return;
      if (k === 0) await cq.wait({ timeoutMs: 20_000 });
    }
  };

  // 1. Token ring: rank 0 starts each lap; everyone forwards.
  const t0 = performance.now();
  for (let lap = 0; lap < args.laps; lap++) {
    if (rank === 0) toRight.postWriteImm(outbox, 0, remoteIn, 0, 64, lap, 0, false);
    await waitFor((i) => batch.opcode[i] === Opcode.RECV_WRITE_IMM && batch.imm[i] === lap);
    if (rank !== 0) toRight.postWriteImm(outbox, 0, remoteIn, 0, 64, lap, 0, false);
  }
  const hopUs = ((performance.now() - t0) * 1000) / args.laps / n;

  // 2. One-sided READ of the left neighbor's greeting from its outbox.
  pairs[left]!.postRead(inbox, 0, remoteOut, 0, 64, 1, true);
  await waitFor((i) => batch.opcode[i] === Opcode.READ);
  const heard = Buffer.from(inbox.bytes.subarray(0, 64)).toString().trim();

  // 3. Everyone streams `blocks` MiB to the right at once; receipts count from the left.
  let sent = 0;
  const t1 = performance.now();
  for (let b = 0; b < args.blocks; b++) {
    toRight.postWriteImm(outbox, 0, remoteIn, (b % SLOTS) * BLOCK, BLOCK, 1_000_000 + b, b, b === args.blocks - 1);
    const k = cq.poll(batch);
    for (let i = 0; i < k; i++) {
      if (isBlock(i)) received++;
      else if (batch.opcode[i] === Opcode.WRITE_IMM) sent = args.blocks;
    }
  }
  while (sent < args.blocks || received < args.blocks) {
    await waitFor(
      (i) => {
        if (batch.opcode[i] === Opcode.WRITE_IMM) sent = args.blocks;
        return true;
      },
      () => sent === args.blocks && received >= args.blocks,
    );
  }
  const gbps = (args.blocks * BLOCK) / ((performance.now() - t1) / 1000) / 1e9;
  console.log(`read "${heard}" from rank ${left} (one-sided); streamed ${args.blocks} MiB to rank ${right} at ${gbps.toFixed(2)} GB/s`);
  const mine: RankReport = { rank, pid: process.pid, hopUs, heard, gbps, received };
  await store.set(`demo/result/${rank}`, new TextEncoder().encode(JSON.stringify(mine)));
  if (rank === 0) {
    const all = (await store.multiGet([...Array(n).keys()].map((p) => `demo/result/${p}`), { timeoutMs: 60_000 })).map((b) => JSON.parse(new TextDecoder().decode(b)) as RankReport);
    const total = all.reduce((a, r) => a + r.gbps, 0);
    console.log(`${n} ranks over ${device.providerName}: token ring ${hopUs.toFixed(2)} us per hop (64 B WRITE_IMM; ranks spin, yield, then sleep); aggregate streaming ${total.toFixed(2)} GB/s`);
  }

  // The raw phase polled the CQ itself; the collectives' transport polls it from now on, so
  // nobody may still be in the raw phase when the first collective message arrives.
  await store.wait([...Array(n).keys()].map((p) => `demo/result/${p}`), { timeoutMs: 60_000 });

  // Collectives over the same connections: a 4 MiB allreduce checked against its known sum,
  // then the latency of a one-element allreduce (awaited, and blocking).
  const grad = new Float32Array(1 << 20).map((_, i) => rank + (i % 7));
  let t2 = performance.now();
  await ctx.allreduce(grad);
  const bigMs = performance.now() - t2;
  const want = (n * (n - 1)) / 2;
  for (let i = 0; i < grad.length; i += 4099) {
    if (grad[i] !== want + n * (i % 7)) throw new Error(`rank ${rank}: allreduce gave ${grad[i]} at ${i}, expected ${want + n * (i % 7)}`);
  }
  const one = new Float64Array(1);
  const iters = 2000;
  t2 = performance.now();
  for (let i = 0; i < iters; i++) await ctx.allreduce(one);
  const awaitUs = ((performance.now() - t2) * 1000) / iters;
  t2 = performance.now();
  for (let i = 0; i < iters; i++) ctx.allreduceSync(one);
  const syncUs = ((performance.now() - t2) * 1000) / iters;
  const mx = await ctx.allreduce(Float64Array.of(bigMs), { op: 'max' });
  if (rank === 0) {
    console.log(`allreduce of 4 MiB float32 (checked): ${mx[0].toFixed(2)} ms (slowest rank); 8 B allreduce: ${awaitUs.toFixed(2)} us awaited, ${syncUs.toFixed(2)} us blocking`);
  }
  await ctx.close();
}

await main();

// One rank of the multi-host tests (test/hosts), started by `weft run` on an emulated host.
// argv[2] is the mode:
//   info   prints "info rank R: {json}" (local rank and size, every rank's host, the provider)
//   loop   allreduces (and barriers, unless the third argument is allreduce-only) in a loop
//          until one fails (arguments: floats, timeout ms); prints "looping rank R" after 10
//          rounds and "rank R error after N ms CODE: message" at the end
//   wake   rank 0 waits (blocking) for a message rank 1 (on another host) sends 300 ms later,
//          long enough for the wait to go to sleep; prints how many times the fabric's relay
//          rang the sleeper's doorbell during that wait (up to 3 rounds, until it rang)
//   near   info, then 1,000 blocking 8-byte allreduces, 100 allreduces of 64 KiB (blocking and
//          awaited in turn), 20 blocking 1 MiB allreduces of a ctx.alloc array and 1,000
//          blocking 8-byte broadcasts from rank 0 (hierarchical); prints "near rank R (local
//          L): wrong W, fabric skips K, chunks sent ..." (chunks written to the other host in
//          each loop)
//          (W: wrong results of the loops; K: fabric reads skipped during the broadcasts, where
//          a rank that is not its host's leader waits on shared memory only and should leave
//          the idle fabric unread on most polls)
//   rpcdead rank 1 serves copyrpc requests (echo); rank 0 keeps 4 in flight toward it with a 60 s
//          timeout and prints "rpc looping rank 0" after 100 answers; once the test has killed
//          rank 1's host, rank 0 prints "rpcdead rank 0 after N ms CODE: message" (N since the
//          last answer). The engine's peer timeout is 2 s.
//   closes ten jobs one after the other in this process (the first from the launcher's
//          environment, the others under prefixes of their own): 20 blocking 8-byte allreduces,
//          then close() with a 60 s timeout; prints "closes rank R: 10 jobs, slowest close N ms".
//          A close that lost its last message over the fabric would wait out those 60 s
//   leaver rank 2 (on a host of its own) closes its context at once and lives on for 4 s; ranks 0
//          and 1 (on two other hosts) exchange 4 KiB messages with each other for 2 s, then print
//          "leaver rank R: N round trips" (or "leaver rank R: CODE: message"). The fabric's probe
//          toward the closed rank is refused for good; it must not hold back their messages
//   fence  40 barriers (blocking and awaited in turn); in each, one rank (in turn) enters 15 ms
//          after the others. Entry and exit times (the machine's monotonic clock, which every
//          emulated host shares) are gathered; prints "fence rank R: 40 barriers, left early E"
//          (E: exits before the last rank's entry, by more than 1 ms)
//   badarg rank 1 passes a wrong allgather output, then a wrong reduceScatter input, then a bad
//          timeoutMs to allreduce; or every rank makes two untagged small allreduces at once
//          (concurrent), or two untagged barriers (concurrent-barrier); every rank prints
//          "badarg rank R: CODE after N ms" for each
//   stall  (host) the ranks of the last host sleep 3 s before their first allreduce; the others
//          make it at once, the leaders with a 3 s timeout and the other ranks 1 s, so a leader
//          waits across hosts and the other ranks of its host time out first, waiting on their
//          leader. (rank1) rank 1 sleeps instead, and rank 0 times out first (1 s; the others
//          3 s), waiting on the host board for a rank that is not in the call. Every rank prints
//          "stall rank R: CODE after N ms (message)"
import { init, type WeftError } from '../../../src/index.js';
import { connectRpcMesh } from '../../../src/rpc/index.js';

const mode = process.argv[2] ?? 'info';
const ctx = await init({ timeoutMs: Number(process.env.WEFT_TEST_TIMEOUT ?? 30_000) });
const { rank, size } = ctx;

if (mode === 'info' || mode === 'near') {
  const hosts = [...Array(size).keys()].map((r) => ctx.hostOf(r));
  console.log(`info rank ${rank}: ${JSON.stringify({ localRank: ctx.localRank, localSize: ctx.localSize, hosts, provider: ctx.device.providerName })}`);
  await ctx.barrier();
  if (mode === 'near') await near();
  await ctx.close();
} else if (mode === 'wake') {
  const x = new Float64Array(1);
  const fabric = (ctx.device as unknown as { ofi?: { ep?: { relayRings(): number } } }).ofi?.ep;
  // Up to 3 rounds: a round can end without the relay and still be right, when the message
  // was already there as the wait began (rank 0 left the barrier late) or came just as the
  // sleeper looked (fi_trywait said "busy": a 1 ms slice instead); the relay must ring in one.
  const rang = new Float64Array(1);
  for (let round = 0; round < 3; round++) {
    ctx.barrierSync();
    if (rank === 1) {
      await new Promise((r) => setTimeout(r, 300));
      x[0] = 42 + round;
      ctx.sendSync(x, 0);
    } else if (rank === 0) {
      // Counted around this one wait: a ring during the barrier must not count for it.
      const before = fabric?.relayRings() ?? NaN;
      ctx.recvSync(x, 1);
      rang[0] = (fabric?.relayRings() ?? NaN) - before;
      console.log(`wake rank 0: got ${x[0] - round}, relay rang ${rang[0]}`);
    }
    ctx.broadcastSync(rang, { root: 0 });
    if (rang[0] >= 1) break;
  }
  ctx.barrierSync();
  await ctx.close();
} else if (mode === 'rpcdead') {
  const rpc = ctx.rpc({ peerTimeoutMs: 2000 });
  const eps = await connectRpcMesh(ctx.store, rpc, rank, size, { timeoutMs: 30_000 });
  if (rank === 1) {
    rpc.serve((payload) => payload);
    await new Promise(() => {}); // until the test kills this host
  }
  const peer = eps[1]!;
  let answered = 0;
  let last = performance.now();
  const one = async () => {
    for (;;) {
      const bytes = new Uint8Array([answered & 0xff, 7]);
      const reply = await peer.request(bytes, { timeoutMs: 60_000 });
      if (reply[0] !== bytes[0] || reply[1] !== 7) throw new Error(`rank 0: the echo came back as ${[...reply]}`);
      last = performance.now();
      if (++answered === 100) console.log('rpc looping rank 0');
    }
  };
  try {
    await Promise.all([one(), one(), one(), one()]);
  } catch (err) {
    console.log(`rpcdead rank 0 after ${Math.round(performance.now() - last)} ms ${(err as WeftError).code}: ${(err as Error).message}`);
  }
  await ctx.close({ timeoutMs: 3000 });
} else if (mode === 'fence') {
  const rounds = 40;
  const ms = () => Number(process.hrtime.bigint()) / 1e6;
  const times = new Float64Array(2 * rounds);
  ctx.barrierSync();
  for (let i = 0; i < rounds; i++) {
    if (rank === i % size) {
      const until = ms() + 15;
      while (ms() < until);
    }
    times[2 * i] = ms();
    if (i & 1) await ctx.barrier();
    else ctx.barrierSync();
    times[2 * i + 1] = ms();
  }
  const all = ctx.allgatherSync(times, new Float64Array(2 * rounds * size));
  let early = 0;
  for (let i = 0; i < rounds; i++) {
    let lastIn = -Infinity;
    for (let r = 0; r < size; r++) lastIn = Math.max(lastIn, all[r * 2 * rounds + 2 * i]);
    for (let r = 0; r < size; r++) if (all[r * 2 * rounds + 2 * i + 1] < lastIn - 1) early++;
  }
  console.log(`fence rank ${rank}: ${rounds} barriers, left early ${early}`);
  await ctx.close();
} else if (mode === 'badarg') {
  // Each call in a job of its own: the first refusal aborts the job, as a flat call's does.
  const which = process.argv[3];
  const t0 = performance.now();
  try {
    if (which === 'allgather') await ctx.allgather(Float32Array.of(rank), new Float32Array(rank === 1 ? size + 1 : size), { timeoutMs: 20_000 });
    else if (which === 'reduceScatter') await ctx.reduceScatter(new Float32Array(rank === 1 ? size + 1 : size), new Float32Array(1), { timeoutMs: 20_000 });
    else if (which === 'reduceScatter-op') await ctx.reduceScatter(new Float32Array(size), new Float32Array(1), { timeoutMs: 20_000, op: (rank === 1 ? 'nope' : 'sum') as 'sum' });
    else if (which === 'tag') await ctx.allreduce(Float32Array.of(rank), { timeoutMs: 20_000, tag: rank === 1 ? Number.NaN : 0 });
    else if (which === 'concurrent') {
      // Two untagged allreduces at once (a misuse): the second is refused when it is made.
      const first = ctx.allreduce(Float32Array.of(rank), { timeoutMs: 20_000 });
      first.catch(() => {});
      await ctx.allreduce(Float32Array.of(rank), { timeoutMs: 20_000 });
    } else if (which === 'concurrent-barrier') {
      // The same with two untagged barriers (their first step is on the host board too).
      const first = ctx.barrier({ timeoutMs: 20_000 });
      first.catch(() => {});
      await ctx.barrier({ timeoutMs: 20_000 });
    } else if (which === 'concurrent-broadcast') {
      // And with two untagged broadcasts (the second would queue behind the first's board hold).
      const first = ctx.broadcast(Float32Array.of(rank), { timeoutMs: 20_000 });
      first.catch(() => {});
      await ctx.broadcast(Float32Array.of(rank), { timeoutMs: 20_000 });
    } else await ctx.allreduce(Float32Array.of(rank), { timeoutMs: rank === 1 ? ('x' as unknown as number) : 20_000 });
    console.log(`badarg rank ${rank}: returned`);
  } catch (err) {
    console.log(`badarg rank ${rank}: ${(err as WeftError).code} after ${Math.round(performance.now() - t0)} ms (${(err as Error).message})`);
  }
  await ctx.close({ timeoutMs: 3000 });
} else if (mode === 'stall') {
  const byHost = process.argv[3] !== 'rank1';
  const late = byHost ? ctx.hosts.hostIndex[rank] === Math.max(...ctx.hosts.hostIndex) : rank === 1;
  if (late) await new Promise((r) => setTimeout(r, 3000));
  const first = byHost ? ctx.localRank !== 0 : rank === 0;
  const t0 = performance.now();
  try {
    await ctx.allreduce(Float32Array.of(rank), { timeoutMs: first ? 1000 : 3000 });
    console.log(`stall rank ${rank}: returned`);
  } catch (err) {
    console.log(`stall rank ${rank}: ${(err as WeftError).code} after ${Math.round(performance.now() - t0)} ms (${(err as Error).message})`);
  }
  await ctx.close({ timeoutMs: 3000 }).catch(() => {});
} else if (mode === 'closes') {
  const JOBS = 10;
  let slowest = 0;
  let job = ctx;
  for (let k = 0; k < JOBS; k++) {
    if (k > 0) job = await init({ prefix: `${process.env.WEFT_PREFIX ?? 'weft'}-close${k}`, timeoutMs: 30_000 });
    const x = new Float64Array(1);
    for (let i = 0; i < 20; i++) {
      x[0] = 1;
      job.allreduceSync(x);
      if (x[0] !== size) throw new Error(`rank ${rank}: allreduce gave ${x[0]} in job ${k}, expected ${size}`);
    }
    const t0 = performance.now();
    await job.close({ timeoutMs: 60_000 });
    slowest = Math.max(slowest, performance.now() - t0);
  }
  console.log(`closes rank ${rank}: ${JOBS} jobs, slowest close ${Math.round(slowest)} ms`);
} else if (mode === 'leaver') {
  if (rank === 2) {
    await ctx.close({ timeoutMs: 200 });
    await new Promise((r) => setTimeout(r, 4000));
  } else {
    // Rank 0 says when to stop (x[0] = 1 in its last message), so both ranks end together.
    const x = new Float32Array(1024);
    const t0 = performance.now();
    let n = 0;
    try {
      for (;;) {
        if (rank === 0) {
          x[0] = performance.now() - t0 > 2000 ? 1 : 0;
          await ctx.send(x, 1, { timeoutMs: 5000 });
          await ctx.recv(x, 1, { timeoutMs: 5000 });
        } else {
          await ctx.recv(x, 0, { timeoutMs: 5000 });
          await ctx.send(x, 0, { timeoutMs: 5000 });
        }
        n++;
        if (x[0] === 1) break;
      }
      console.log(`leaver rank ${rank}: ${n} round trips`);
    } catch (err) {
      console.log(`leaver rank ${rank}: ${(err as WeftError).code}: ${(err as Error).message}`);
    }
    // Not close(): its fence would wait for rank 2, which left already.
  }
  process.exit(0);
} else if (mode === 'loop') {
  // argv[6] 'alloc': the array comes from ctx.alloc (large ones take the in-place plan).
  const n = Number(process.argv[3] ?? 50_000);
  const x = process.argv[6] === 'alloc' ? ctx.alloc(Float32Array, n) : new Float32Array(n);
  const timeoutMs = Number(process.argv[4] ?? 5000);
  const allreduceOnly = process.argv[5] === 'allreduce-only';
  let t0 = performance.now();
  try {
    for (let i = 0; ; i++) {
      if (i === 10) console.log(`looping rank ${rank}`);
      x.fill(1);
      await ctx.allreduce(x, { timeoutMs });
      if (x[0] !== size) throw new Error(`rank ${rank}: allreduce gave ${x[0]}, expected ${size}`);
      if (!allreduceOnly) await ctx.barrier({ timeoutMs });
      t0 = performance.now();
    }
  } catch (err) {
    console.log(`rank ${rank} error after ${Math.round(performance.now() - t0)} ms ${(err as WeftError).code}: ${(err as Error).message}`);
  }
  await ctx.close({ timeoutMs: 3000 });
}

/** Mode 'near' (see the top). */
async function near(): Promise<void> {
  const cq = (ctx.device as unknown as { cq: { fabricSkips?: number } }).cq;
  const x = new Float64Array(1);
  let wrong = 0;
  ctx.barrierSync();
  // Chunks this rank wrote toward ranks of the other host (their pairs run on the fabric).
  const pairs = (ctx as unknown as { transport: { pairs: ({ peer: number; sent: number } | undefined)[] } }).transport.pairs;
  const fabricSent = () => pairs.reduce((n, p) => n + (p && ctx.hosts.hostIndex[p.peer] !== ctx.hosts.hostIndex[rank] ? p.sent : 0), 0);
  const sentAtStart = fabricSent();
  for (let i = 0; i < 1000; i++) {
    x[0] = rank + i;
    ctx.allreduceSync(x);
    // 0 + 1 + ... + (size-1) + size * i
    if (x[0] !== (size * (size - 1)) / 2 + size * i) wrong++;
  }
  // Only the leaders cross the network in a small allreduce (docs/hosts.md): the others leave
  // the fabric unread while they wait on the host board.
  const sentInAllreduces = fabricSent() - sentAtStart;
  // 64 KiB, what the host board holds: the host-board plan with a full board (sync and awaited).
  const full = ctx.alloc(Float32Array, 16384);
  for (let i = 0; i < 100; i++) {
    for (let k = 0; k < full.length; k++) full[k] = rank + k + i;
    if (i & 1) await ctx.allreduce(full);
    else ctx.allreduceSync(full);
    for (let k = 0; k < full.length; k++) if (full[k] !== (size * (size - 1)) / 2 + size * (k + i)) {
      wrong++;
      break;
    }
  }
  // 1 MiB from ctx.alloc, in place: every local rank crosses with its chunk when the hosts
  // have a core per rank, the leader alone with the whole array when a host has fewer
  // (WEFT_CORES=1 here).
  const large = ctx.alloc(Float32Array, 262_144);
  const sentAtLarge = fabricSent();
  for (let i = 0; i < 20; i++) {
    large.fill(rank + i);
    ctx.allreduceSync(large);
    const want = (size * (size - 1)) / 2 + size * i;
    if (large[0] !== want || large[large.length - 1] !== want || large[large.length >> 1] !== want) wrong++;
  }
  const sentInLarge = fabricSent() - sentAtLarge;
  // A small broadcast reaches a host's other ranks from its leader on the host board.
  const sentAtBroadcasts = fabricSent();
  for (let i = 0; i < 1000; i++) {
    x[0] = rank === 0 ? i : -1;
    ctx.broadcastSync(x, { root: 0 });
    if (x[0] !== i) wrong++;
  }
  const sentInBroadcasts = fabricSent() - sentAtBroadcasts;
  // A larger one (past the board: messages) from the leader over shared memory, while the
  // fabric is idle here: the others read it only now and then (the skips).
  const big = new Float64Array(16_384);
  ctx.barrierSync();
  const before = cq.fabricSkips ?? NaN;
  for (let i = 0; i < 300; i++) {
    big[0] = rank === 0 ? i : -1;
    ctx.broadcastSync(big, { root: 0 });
    if (big[0] !== i) wrong++;
  }
  console.log(`near rank ${rank} (local ${ctx.localRank}): wrong ${wrong}, fabric skips ${(cq.fabricSkips ?? NaN) - before}, chunks sent to the other host in 1000 small allreduces ${sentInAllreduces}, in 1000 small broadcasts ${sentInBroadcasts}, in 20 allreduces of 1 MiB ${sentInLarge}`);
  ctx.barrierSync();
}

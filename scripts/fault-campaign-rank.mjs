#!/usr/bin/env node
// One rank of scripts/fault-campaign.mjs: joins the job (weft run, or the environment the
// driver sets), then loops forever over a random mix of collectives (the same sequence on
// every rank, from FC_SEED; Promise or Sync form chosen per rank and call), checking every
// result. It reports on stdout, one line each, `FC {json}` with `t` = performance.timeOrigin +
// performance.now() (the driver uses the same clock):
//   ready  {pid}                     joined the job
//   loop   {it}                      FC_WARMUP calls done: the driver may now pick its moment
//   error  {it, coll, sync, code, message}   the first call that failed (then close, exit 1)
//   wrong  {it, coll, sync, index, got, want} a call returned a wrong result (then close, exit 1)
//   closed {ms}                      close() returned, `ms` after the failure
//   sigterm                          the launcher's SIGTERM arrived before this rank failed (see FC_SIGTERM)
//   stuck                            the process stayed alive 2 s after close() (live handles)
// A call failing with anything but a WeftError is reported as an error with code 'JS'.
import { writeSync } from 'node:fs';
import { init } from '../dist/src/index.js';

const env = process.env;
const clock = () => performance.timeOrigin + performance.now();
let rank = Number(env.WEFT_RANK ?? env.RANK ?? -1);

function emit(ev, o = {}) {
  const line = `FC ${JSON.stringify({ ev, rank, pid: process.pid, t: clock(), ...o })}\n`;
  try {
    writeSync(1, line);
  } catch {
    // stdout gone (driver died): nothing to tell.
  }
}

// `weft run` SIGTERMs the other ranks as soon as one rank exits (here: the SIGKILLed victim),
// which would end survivors before weft reports anything. FC_SIGTERM=defer (the default) keeps
// looping until this rank's own call fails (the launcher SIGKILLs after its 3 s grace);
// FC_SIGTERM=default dies of it at once, as the default handler would (no exit hooks: the
// launcher's sweep must clean up after us). Either way the driver hears when it came.
let failed = false;
process.on('SIGTERM', () => {
  if (!failed) emit('sigterm');
  if (env.FC_SIGTERM === 'default') {
    process.removeAllListeners('SIGTERM');
    process.kill(process.pid, 'SIGTERM');
  }
});

// Same sequence of collectives on every rank (mulberry32 from the shared seed); the
// Promise/Sync choice is this rank's own.
function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const seed = Number(env.FC_SEED ?? 1);
const shared = prng(seed);
const mine = prng(seed * 31 + rank + 1);
const WARMUP = Number(env.FC_WARMUP ?? 20);
const syncShare = Number(env.FC_SYNC_SHARE ?? 0.5);

let ctx;
try {
  ctx = await init();
} catch (err) {
  emit('init-failed', { code: err?.code ?? 'JS', message: String(err?.message ?? err) });
  process.exit(2);
}
rank = ctx.rank;
const n = ctx.size;
emit('ready', { size: n });

// v(k, i): small integers, so float32 sums over a few ranks are exact.
const v = (k, i) => ((k * 7 + i) % 13) + 1;
const tri = (n * (n + 1)) / 2;

const BOARD = 4; // allreduce on the board (shm) / direct (ofi)
const LARGE = 64 * 1024; // allreduce through the rings
const BCAST = 16 * 1024;
const BLOCK = 1024; // per-rank block of allgather, alltoall, reduceScatter, gather, scatter
const sharedArr = ctx.alloc(Float32Array, LARGE); // allreduce 'shared' on shm (every rank passes one)
const small = new Float32Array(BOARD);
const large = new Float32Array(LARGE);
const bcast = new Float32Array(BCAST);
const red = new Float32Array(BCAST);
const blockIn = new Float32Array(BLOCK);
const nIn = new Float32Array(n * BLOCK);
const nOut = new Float32Array(n * BLOCK);
const blockOut = new Float32Array(BLOCK);

class Wrong extends Error {
  constructor(index, got, want) {
    super(`element ${index}: got ${got}, want ${want}`);
    this.index = index;
    this.got = got;
    this.want = want;
  }
}
function expect(arr, want) {
  for (let i = 0; i < arr.length; i++) {
    const w = want(i);
    if (arr[i] !== w) throw new Wrong(i, arr[i], w);
  }
}

// Each collective: (k, sync) => Promise | undefined, checking its result.
const calls = {
  'allreduce-board': (k, sync) => allreduceCase(small, k, sync),
  'allreduce-ring': (k, sync) => allreduceCase(large, k, sync),
  'allreduce-shared': (k, sync) => allreduceCase(sharedArr, k, sync),
  broadcast: (k, sync) => {
    const root = k % n;
    if (rank === root) for (let i = 0; i < BCAST; i++) bcast[i] = (root + 1) * v(k, i);
    else bcast.fill(-1);
    return then(sync ? ctx.broadcastSync(bcast, { root }) : ctx.broadcast(bcast, { root }), () => expect(bcast, (i) => (root + 1) * v(k, i)));
  },
  reduce: (k, sync) => {
    const root = (k + 1) % n;
    for (let i = 0; i < BCAST; i++) red[i] = (rank + 1) * v(k, i);
    return then(sync ? ctx.reduceSync(red, { root }) : ctx.reduce(red, { root }), () =>
      expect(red, rank === root ? (i) => tri * v(k, i) : (i) => (rank + 1) * v(k, i)),
    );
  },
  allgather: (k, sync) => {
    for (let i = 0; i < BLOCK; i++) blockIn[i] = (rank + 1) * v(k, i);
    nOut.fill(-1);
    return then(sync ? ctx.allgatherSync(blockIn, nOut) : ctx.allgather(blockIn, nOut), () => expect(nOut, (j) => (Math.floor(j / BLOCK) + 1) * v(k, j % BLOCK)));
  },
  alltoall: (k, sync) => {
    // Block q of rank r's input goes to rank q: r*16 + q + 256*v.
    for (let j = 0; j < n * BLOCK; j++) nIn[j] = rank * 16 + Math.floor(j / BLOCK) + 256 * v(k, j % BLOCK);
    nOut.fill(-1);
    return then(sync ? ctx.alltoallSync(nIn, nOut) : ctx.alltoall(nIn, nOut), () => expect(nOut, (j) => Math.floor(j / BLOCK) * 16 + rank + 256 * v(k, j % BLOCK)));
  },
  reduceScatter: (k, sync) => {
    for (let j = 0; j < n * BLOCK; j++) nIn[j] = (rank + 1) * v(k, j);
    blockOut.fill(-1);
    return then(sync ? ctx.reduceScatterSync(nIn, blockOut) : ctx.reduceScatter(nIn, blockOut), () => expect(blockOut, (i) => tri * v(k, rank * BLOCK + i)));
  },
  gather: (k, sync) => {
    const root = (k + 2) % n;
    for (let i = 0; i < BLOCK; i++) blockIn[i] = (rank + 1) * v(k, i);
    nOut.fill(-1);
    const out = rank === root ? nOut : undefined;
    return then(sync ? ctx.gatherSync(blockIn, out, { root }) : ctx.gather(blockIn, out, { root }), () => {
      if (rank === root) expect(nOut, (j) => (Math.floor(j / BLOCK) + 1) * v(k, j % BLOCK));
    });
  },
  scatter: (k, sync) => {
    const root = (k + 3) % n;
    if (rank === root) for (let j = 0; j < n * BLOCK; j++) nIn[j] = (Math.floor(j / BLOCK) + 1) * v(k, j % BLOCK);
    const input = rank === root ? nIn : undefined;
    blockOut.fill(-1);
    return then(sync ? ctx.scatterSync(input, blockOut, { root }) : ctx.scatter(input, blockOut, { root }), () => expect(blockOut, (i) => (rank + 1) * v(k, i)));
  },
  barrier: (k, sync) => (sync ? ctx.barrierSync() : ctx.barrier()),
};

function allreduceCase(arr, k, sync) {
  for (let i = 0; i < arr.length; i++) arr[i] = (rank + 1) * v(k, i);
  return then(sync ? ctx.allreduceSync(arr) : ctx.allreduce(arr), () => expect(arr, (i) => tri * v(k, i)));
}

/** Runs `check` after a Sync call's value or a Promise. */
function then(r, check) {
  if (r && typeof r.then === 'function') return r.then(() => check());
  check();
  return undefined;
}

const only = env.FC_COLLECTIVES ? env.FC_COLLECTIVES.split(',') : undefined;
const kinds = Object.keys(calls).filter((c) => !only || only.includes(c));

// A rank hosting the TcpStore (rank 0 without a launcher) returns from init() while a slower
// rank may still wait for the store's answer to its last `mesh/connected` wait; a Sync call right
// away blocks rank 0's event loop, so that rank never leaves init() and everybody times out.
// One Promise barrier first lets the event loop serve it (FC_FIRST_BARRIER=0: no barrier).
if (env.FC_FIRST_BARRIER !== '0') {
  try {
    await ctx.barrier();
  } catch (err) {
    emit('init-failed', { code: err?.code ?? 'JS', message: `first barrier: ${String(err?.message ?? err)}` });
    process.exit(2);
  }
}

let it = 0;
let coll = '';
let sync = false;
try {
  for (it = 1; ; it++) {
    coll = kinds[Math.floor(shared() * kinds.length)];
    sync = mine() < syncShare;
    const r = calls[coll](it, sync);
    if (r) await r;
    if (it === WARMUP) emit('loop', { it });
    // Let the event loop turn now and then (timers, the launcher watchdog), as programs do.
    if ((it & 15) === 0) await new Promise((res) => setImmediate(res));
  }
} catch (err) {
  failed = true;
  const t = clock();
  if (err instanceof Wrong) emit('wrong', { it, coll, sync, index: err.index, got: err.got, want: err.want });
  else emit('error', { it, coll, sync, code: err?.code ?? 'JS', message: String(err?.message ?? err), ...(err?.code ? {} : { stack: String(err?.stack ?? '') }) });
  try {
    await ctx.close();
    emit('closed', { ms: clock() - t });
  } catch (e) {
    emit('close-failed', { code: e?.code ?? 'JS', message: String(e?.message ?? e), ms: clock() - t });
  }
  process.exitCode = 1;
  // Live handles after close() would keep the process alive: report and leave.
  setTimeout(() => {
    emit('stuck');
    process.exit(1);
  }, 2000).unref();
}

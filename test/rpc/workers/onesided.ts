/**
 * Worker scenarios (registered in worker.ts) for copyrpc's one-sided paths:
 *   onesided      rank 0 rdmaRead's / rdmaWrite's a region rank 1 allocated (pieces at odd
 *                 offsets, whole, out-of-range remote and local ranges), then asks rank 1
 *                 with a request to check its own memory
 *   readFallback  rank 0 calls rank 1 with 1 KiB payloads over 32 KiB rings while rank 1
 *                 takes the requests (a few at a time, when rank 0 flags that it is stuck) but
 *                 holds every reply, so rank 0's only news of rank 1's consumer position is
 *                 the rare metadata-only batch and the RDMA READ it posts on RING_FULL; rank 1
 *                 answers a round when the parent relays rank 0's 'release-round' event
 * Every loop that waits for something has a deadline and fails with what it was waiting for.
 */
import { RING_FULL, internalAllowance, type RpcEngine, type Endpoint, type RecvHandle } from '../../../src/rpc/index.js';
import type { MemoryRegion } from '../../../src/nic/index.js';
import type { WeftError } from '../../../src/errors.js';
import { fnv, joinRpcMesh } from './mesh.js';
import { sendEvent, sendResult, tick } from '../../../harness/worker-ipc.js';

export interface WorkerEnv {
  rank: number;
  n: number;
  provider: string;
  args: Record<string, number | string | boolean>;
  releasedP: Promise<void>;
}

const enc = (x: unknown) => new TextEncoder().encode(JSON.stringify(x));
const dec = (b: Uint8Array) => JSON.parse(new TextDecoder().decode(b)) as unknown;

/** Waits on the context's CQ for at most `ms`; a timeout only means "loop again". */
async function waitBriefly(ctx: RpcEngine<any>, ms: number): Promise<void> {
  try {
    await ctx.wait({ timeoutMs: ms });
  } catch (err) {
    if ((err as WeftError).code !== 'ETIMEDOUT') throw err;
  }
}

/**
 * Polls `ctx` (this code owns its poll: no driver may run meanwhile) until `done()`; throws
 * after `ms`, naming `what` and the state `describe()` gives.
 */
async function pollUntil(ctx: RpcEngine<any>, what: string, done: () => boolean, ms: number, describe: () => string = () => '', onResponse?: Parameters<RpcEngine<any>['poll']>[0], onFailed?: Parameters<RpcEngine<any>['poll']>[1]): Promise<void> {
  const deadline = performance.now() + ms;
  let turns = 0;
  while (!done()) {
    if (performance.now() > deadline) throw new Error(`${ctx.label}: ${what} did not happen within ${ms} ms ${describe()}`);
    const k = ctx.poll(onResponse, onFailed);
    if (done()) break;
    if (k === 0) await waitBriefly(ctx, 2);
    else if ((++turns & 63) === 0) await tick();
  }
}

// ---- onesided ---------------------------------------------------------------------------

/** Size of rank 1's region: not a multiple of anything. */
export const REGION = 65536 + 3;
/** Rank 1's initial contents, and what rank 0 writes (differs from A at every byte). */
export const patA = (i: number) => (i * 31 + 7) & 255;
export const patB = (i: number) => patA(i) ^ 0xa5;

/**
 * Remote ranges rank 0 rdmaWrite's, [offset, length]: all but the last from the same offsets
 * of a region filled with patB, the last from offset 9 of a small one.
 */
export const WRITES: [number, number][] = [
  [777, 10001],
  [40000, 1],
  [32769, 4095],
  [REGION - 3, 3],
  [50001, 999],
];

const inWrites = (i: number) => WRITES.some(([o, l]) => i >= o && i < o + l);
/** What rank 1's region must hold after the writes. */
export const expectedAfterWrites = (i: number) => (inWrites(i) ? patB(i) : patA(i));

/** First byte of bytes[at, at+len) that is not want(i) (i counted from 0), or undefined. */
function firstMismatch(bytes: Uint8Array, at: number, len: number, want: (i: number) => number): string | undefined {
  for (let i = 0; i < len; i++) if (bytes[at + i] !== want(i)) return `byte ${i} (at ${at + i}) is ${bytes[at + i]}, want ${want(i)}`;
  return undefined;
}

/** Outcome of posting raw operations that must fail at completion. */
interface AsyncFailure {
  what: string;
  pendingAfterPost: number;
  failed: number;
  code: string | undefined;
  message: string | undefined;
}

export async function onesidedScenario(env: WorkerEnv): Promise<void> {
  const { rank, n, provider, releasedP } = env;
  const epOptions = { sendRingSize: 1 << 16, recvRingSize: 1 << 16 };
  if (rank === 1) {
    let region: MemoryRegion | undefined;
    const { ctx } = await joinRpcMesh<unknown>(rank, n, provider, {}, epOptions, undefined, (c) => {
      region = c.allocate(REGION);
      for (let i = 0; i < REGION; i++) region.bytes[i] = patA(i);
      return [region.descriptor()];
    });
    const mr = region as MemoryRegion;
    // Rank 0 asks once, after its writes completed: check every byte of our region.
    let verdict: { ok: boolean; mismatch?: string; length: number } | undefined;
    const server = ctx.serve((payload) => {
      const writes = dec(payload) as [number, number][];
      const want = (i: number) => (writes.some(([o, l]) => i >= o && i < o + l) ? patB(i) : patA(i));
      const mismatch = firstMismatch(mr.bytes, 0, mr.byteLength, want);
      verdict = { ok: mismatch === undefined, mismatch, length: mr.byteLength };
      return enc(verdict);
    });
    const deadline = performance.now() + 30_000;
    while (verdict === undefined) {
      if (performance.now() > deadline) throw new Error('rank 1: rank 0 never asked for the memory check (30 s)');
      await new Promise((r) => setTimeout(r, 5));
    }
    sendResult(rank, { verdict });
    await releasedP;
    server.close();
    ctx.close();
    return;
  }

  const { ctx, eps, descs } = await joinRpcMesh<unknown>(rank, n, provider, {}, epOptions);
  const ep = eps[1] as Endpoint<unknown>;
  const state = () => `(rawPending ${ctx.rawPending}, rawFailed ${ctx.rawFailed}, endpoint ${ep.state}, QP ${ep.qp.state}/${ep.qp.pendingOps} pending)`;
  const drain = (what: string) => pollUntil(ctx, `${what}: rawPending back to 0`, () => ctx.rawPending === 0, 10_000, state);
  const remote = ep.importRegion(descs[1][0]);
  const out: Record<string, unknown> = { remoteLength: remote.byteLength };

  // 1. Pieces of odd lengths at odd offsets, into a local region shifted by SHIFT bytes,
  // all posted before any completion is polled.
  const SHIFT = 5;
  const CANARY = 0xee;
  const local = ctx.allocate(REGION + 16);
  local.bytes.fill(CANARY);
  const pieces: [number, number][] = [];
  let at = 0;
  for (const len of [1, 3, 4093, 7, 32768, 17]) {
    pieces.push([at, len]);
    at += len;
  }
  pieces.push([at, REGION - at]);
  for (const [off, len] of pieces) ep.rdmaRead(local, off + SHIFT, remote, off, len);
  out.piecesPosted = pieces.length;
  out.pendingAfterPieces = ctx.rawPending;
  await drain('piecewise rdmaRead');
  out.piecesFailed = ctx.rawFailed;
  out.piecesMismatch =
    firstMismatch(local.bytes, 0, SHIFT, () => CANARY) ??
    firstMismatch(local.bytes, SHIFT, REGION, patA) ??
    firstMismatch(local.bytes, SHIFT + REGION, local.byteLength - SHIFT - REGION, () => CANARY) ??
    null;

  // 2. The whole region in one READ.
  const whole = ctx.allocate(REGION);
  ep.rdmaRead(whole, 0, remote, 0, REGION);
  out.pendingAfterWhole = ctx.rawPending;
  await drain('whole rdmaRead');
  out.wholeMismatch = firstMismatch(whole.bytes, 0, REGION, patA) ?? null;

  // 3. rdmaWrite a second pattern to parts of it (odd offsets and lengths, one from another
  // local offset), then READ it all back.
  const src = ctx.allocate(REGION);
  for (let i = 0; i < REGION; i++) src.bytes[i] = patB(i);
  for (const [off, len] of WRITES.slice(0, -1)) ep.rdmaWrite(src, off, remote, off, len);
  const [sOff, sLen] = WRITES[WRITES.length - 1];
  const small = ctx.allocate(sLen + 16);
  for (let i = 0; i < sLen; i++) small.bytes[9 + i] = patB(sOff + i);
  ep.rdmaWrite(small, 9, remote, sOff, sLen);
  out.pendingAfterWrites = ctx.rawPending;
  await drain('rdmaWrite');
  whole.bytes.fill(0);
  ep.rdmaRead(whole, 0, remote, 0, REGION);
  await drain('read-back');
  out.readBackMismatch = firstMismatch(whole.bytes, 0, REGION, expectedAfterWrites) ?? null;
  out.failedAfterGood = ctx.rawFailed;

  // 4. Remote ranges beyond the region: each completes with an error, the local buffer and
  // the remote memory stay untouched.
  const failures: AsyncFailure[] = [];
  const expectFailure = async (what: string, post: () => void) => {
    const before = ctx.rawFailed;
    ctx.rawError = undefined;
    post();
    const pendingAfterPost = ctx.rawPending;
    await drain(what);
    // (A cast: TypeScript still thinks rawError is the undefined assigned above.)
    const err = ctx.rawError as WeftError | undefined;
    failures.push({ what, pendingAfterPost, failed: ctx.rawFailed - before, code: err?.code, message: err?.message });
  };
  const scratch = ctx.allocate(64);
  scratch.bytes.fill(0x33);
  await expectFailure('read 20 bytes at REGION-10', () => ep.rdmaRead(scratch, 0, remote, REGION - 10, 20));
  await expectFailure('read 1 byte at REGION', () => ep.rdmaRead(scratch, 0, remote, REGION, 1));
  await expectFailure('read 1 byte at 2^32-1', () => ep.rdmaRead(scratch, 0, remote, 0xffffffff, 1));
  await expectFailure('write 3 bytes at REGION-2', () => ep.rdmaWrite(src, 0, remote, REGION - 2, 3));
  out.failures = failures;
  out.scratchAfterFailures = firstMismatch(scratch.bytes, 0, 64, () => 0x33) ?? null;

  // 5. A failing READ between two good ones: only it fails, both others land.
  const mixed = ctx.allocate(200);
  const failedBeforeMixed = ctx.rawFailed;
  ep.rdmaRead(mixed, 0, remote, 100, 100);
  ep.rdmaRead(mixed, 0, remote, REGION - 50, 100);
  ep.rdmaRead(mixed, 100, remote, 60000, 100);
  out.pendingAfterMixed = ctx.rawPending;
  await drain('mixed reads');
  out.mixedFailed = ctx.rawFailed - failedBeforeMixed;
  out.mixedMismatch =
    firstMismatch(mixed.bytes, 0, 100, (i) => expectedAfterWrites(100 + i)) ??
    firstMismatch(mixed.bytes, 100, 100, (i) => expectedAfterWrites(60000 + i)) ??
    null;

  // 6. Bad local ranges and bad numbers throw EINVAL at once and post nothing.
  const sync: { what: string; code: string | undefined; message: string }[] = [];
  const expectThrow = (what: string, post: () => void) => {
    try {
      post();
      sync.push({ what, code: undefined, message: 'did not throw' });
    } catch (err) {
      sync.push({ what, code: (err as WeftError).code, message: (err as Error).message });
    }
  };
  expectThrow('read into [REGION-5, REGION+5) of a REGION-byte local region', () => ep.rdmaRead(whole, REGION - 5, remote, 0, 10));
  expectThrow('write from [REGION, REGION+1)', () => ep.rdmaWrite(src, REGION, remote, 0, 1));
  expectThrow('read at local offset -1', () => ep.rdmaRead(whole, -1, remote, 0, 1));
  expectThrow('read at remote offset -1', () => ep.rdmaRead(whole, 0, remote, -1, 1));
  expectThrow('read of 1.5 bytes', () => ep.rdmaRead(whole, 0, remote, 0, 1.5));
  out.sync = sync;
  out.pendingAfterSync = ctx.rawPending;

  // 7. The endpoint still carries calls: rank 1 checks its memory and answers.
  out.stateAfterErrors = ep.state;
  const verdict = dec(await ep.request(enc(WRITES), { timeoutMs: 10_000 })) as { ok: boolean; mismatch?: string; length: number };
  out.verdict = verdict;
  out.rawPendingAtEnd = ctx.rawPending;
  out.rawFailedAtEnd = ctx.rawFailed;
  sendResult(rank, out);
  await releasedP;
  ctx.close();
}

// ---- readFallback -----------------------------------------------------------------------

const RESP_MAGIC = 0xc0ffee;

/** Payload of call `seq`: seq (u32 LE) then bytes that depend on seq. */
function fillPayload(seq: number, out: Uint8Array): void {
  for (let i = 4; i < out.length; i++) out[i] = (seq * 7 + i * 13) & 255;
  new DataView(out.buffer, out.byteOffset, 4).setUint32(0, seq, true);
}

/** Rank 1's answer to a payload: seq, FNV-1a of the payload, its length, a magic word. */
function answerFor(buf: Uint8Array, off: number, len: number): Uint8Array {
  const out = new Uint8Array(16);
  const v = new DataView(out.buffer);
  v.setUint32(0, buf[off] | (buf[off + 1] << 8) | (buf[off + 2] << 16) | (buf[off + 3] << 24), true);
  v.setUint32(4, fnv(buf, off, len), true);
  v.setUint32(8, len, true);
  v.setUint32(12, RESP_MAGIC, true);
  return out;
}

export interface FallbackRound {
  issued: number;
  ringFull: number;
  reads: number;
  batchesReceived: number;
  /** RING_FULL streaks (each flagged to rank 1 by one rdmaWrite). */
  streaks: number;
  /** Streaks that ended with a READ, and no batch from rank 1, since the streak began. */
  unblockedByRead: number;
  /** What one more call returned once the round's calls were all out (credit exhausted). */
  extraCall: number;
  /** Responses that arrived while rank 1 held this round's replies. */
  earlyResponses: number;
}

/**
 * Rank 1 takes requests only when rank 0 tells it (by an rdmaWrite of a streak number into a
 * flag word of rank 1's memory) that it met RING_FULL, and then only `chunk` of them: 6 of
 * these 1088-byte batches (plus at most one wrap skip) are less than the quarter ring after
 * which rank 1 reports its consumer position in a metadata-only batch. So rank 0 is stuck
 * each time rank 1 takes, and after every chunk that does not cross a report, the READ of
 * rank 1's consumer word is the only way it can learn that there is room again.
 */
export async function readFallbackScenario(env: WorkerEnv): Promise<void> {
  const { rank, n, provider, args, releasedP } = env;
  const ring = Number(args.ring ?? 32768);
  const payloadLen = Number(args.payload ?? 1024);
  const allowance = Number(args.allowance ?? 16);
  const rounds = Number(args.rounds ?? 3);
  const phaseMs = Number(args.phaseMs ?? 15_000);
  const chunk = Number(args.chunk ?? 6);
  const epOptions = { sendRingSize: ring, recvRingSize: ring };

  if (rank === 1) {
    let released = false;
    void releasedP.then(() => (released = true));
    let flagMr: MemoryRegion | undefined;
    const { ctx, eps } = await joinRpcMesh<unknown>(rank, n, provider, {}, epOptions, undefined, (c) => {
      flagMr = c.allocate(64);
      return [flagMr.descriptor()];
    });
    const flag = (flagMr as MemoryRegion).bytes;
    const ep = eps[0] as Endpoint<unknown>;
    const releases: number[] = [];
    const onMsg = (m: { type: string; data?: { expect: number } }) => {
      if (m.type === 'release-round' && m.data) releases.push(m.data.expect);
    };
    process.on('message', onMsg);
    const held: { h: RecvHandle<unknown>; resp: Uint8Array }[] = [];
    const errors: string[] = [];
    const heldPerRound: number[] = [];
    let got = 0;
    let streak = 0;
    let episodes = 0;
    let lastProgress = performance.now();
    while (!released) {
      const k = ctx.poll();
      // Any change of the flag is a new streak (a torn read only makes us take early).
      const s = flag[0] | (flag[1] << 8) | (flag[2] << 16) | (flag[3] << 24);
      let budget = 0;
      if (s !== streak) {
        streak = s;
        budget = chunk;
        episodes++;
      }
      // At the end of a round rank 0 asks for everything it sent.
      const all = releases.length > 0;
      let taken = 0;
      while (all || taken < budget) {
        const h = ctx.recv();
        if (!h) break;
        taken++;
        // The payload is only valid until the next poll: answer now, reply later.
        const resp = answerFor(h.buffer, h.offset, h.length);
        const seq = new DataView(resp.buffer).getUint32(0, true);
        if (seq !== got && errors.length < 10) errors.push(`request ${got} carried seq ${seq} (out of order or lost)`);
        held.push({ h, resp });
        got++;
      }
      const now = performance.now();
      if (k > 0 || taken > 0) lastProgress = now;
      // Answer a round once everything rank 0 sent up to then is here, newest first.
      if (releases.length > 0 && got >= releases[0]) {
        releases.shift();
        heldPerRound.push(held.length);
        while (held.length > 0) {
          const { h, resp } = held.pop()!;
          h.reply(resp);
        }
        if (heldPerRound.length === rounds) sendResult(rank, { got, heldPerRound, errors, episodes, batchesSent: ep.stats.batchesSent });
        lastProgress = now;
      }
      if (now - lastProgress > phaseMs) throw new Error(`rank 1: nothing happened for ${phaseMs} ms: got ${got}, holding ${held.length}, queued ${ctx.queuedRequests}, streak ${streak}, releases asked ${JSON.stringify(releases)}, answered rounds ${heldPerRound.length}, ${JSON.stringify(ep.debugState())}`);
      if (k === 0 && taken === 0) await waitBriefly(ctx, 1);
      else await tick();
    }
    process.off('message', onMsg);
    ctx.close();
    return;
  }

  const { ctx, eps, descs } = await joinRpcMesh<number>(rank, n, provider, {}, epOptions);
  const ep = eps[1] as Endpoint<number>;
  const flagRemote = ep.importRegion(descs[1][0]);
  // One 4-byte slot per streak (mod 16), so a WRITE still in flight never sees its source change.
  const flagSrc = ctx.allocate(64);
  const flagView = new DataView(flagSrc.bytes.buffer, flagSrc.bytes.byteOffset, 64);
  const ia = internalAllowance(allowance);
  // Rank 1 grants nothing while it holds replies: the initial credit bounds a round.
  const perRound = Math.floor(ep.debugState().peerCap / ia);
  const total = rounds * perRound;
  const seen = new Uint8Array(total);
  const payload = new Uint8Array(payloadLen);
  const check = new Uint8Array(payloadLen);
  const errors: string[] = [];
  const note = (e: string) => errors.length < 10 && errors.push(e);
  let answered = 0;
  const onResponse = (seq: number, buf: Uint8Array, off: number, len: number) => {
    if (seq < 0 || seq >= total || seen[seq]) return note(`response for call ${seq} arrived twice or was never made`);
    seen[seq] = 1;
    answered++;
    fillPayload(seq, check);
    const v = new DataView(buf.buffer, buf.byteOffset + off, Math.min(len, 16));
    if (len !== 16) return note(`call ${seq}: ${len}-byte response, want 16`);
    const got = [v.getUint32(0, true), v.getUint32(4, true), v.getUint32(8, true), v.getUint32(12, true)];
    const want = [seq, fnv(check, 0, payloadLen), payloadLen, RESP_MAGIC];
    if (got.some((x, i) => x !== want[i])) note(`call ${seq}: response ${got.join(',')}, want ${want.join(',')}`);
  };
  const onFailed = (seq: number, err: WeftError) => note(`call ${seq} failed: ${err.code}: ${err.message}`);
  const describe = () => `(answered ${answered}, rawPending ${ctx.rawPending}, endpoint ${ep.state}, ${JSON.stringify({ ...ep.debugState(), ...ep.stats })})`;

  const roundStats: FallbackRound[] = [];
  let seq = 0;
  let streakId = 0;
  for (let round = 0; round < rounds; round++) {
    const s0 = { ...ep.stats };
    const first = seq;
    const answeredBefore = answered;
    let unblockedByRead = 0;
    let streaks = 0;
    let fullSince: { batches: number; reads: number } | undefined;
    const deadline = performance.now() + phaseMs;
    let turns = 0;
    // As fast as possible: every call is its own batch (a poll after each); on RING_FULL,
    // poll (which posts the consumer READ) and retry.
    while (seq - first < perRound) {
      if (performance.now() > deadline) throw new Error(`rank 0: round ${round}: issued only ${seq - first} of ${perRound} calls within ${phaseMs} ms while rank 1 held its replies ${describe()}`);
      fillPayload(seq, payload);
      const id = ep.call(payload, seq, allowance);
      if (id >= 0) {
        if (fullSince && ep.stats.batchesReceived === fullSince.batches && ep.stats.reads > fullSince.reads) unblockedByRead++;
        fullSince = undefined;
        seq++;
        ctx.poll(onResponse, onFailed);
        continue;
      }
      if (id === RING_FULL && !fullSince) {
        fullSince = { batches: ep.stats.batchesReceived, reads: ep.stats.reads };
        streaks++;
        streakId++;
        const slot = (streakId & 15) * 4;
        flagView.setUint32(slot, streakId, true);
        ep.rdmaWrite(flagSrc, slot, flagRemote, 0, 4);
      }
      // INSUFFICIENT_CREDIT before perRound: the last round's grants are still on their way.
      const k = ctx.poll(onResponse, onFailed);
      if (k === 0) await waitBriefly(ctx, 1);
      else if ((++turns & 63) === 0) await tick();
      if (errors.length > 0) throw new Error(`rank 0: ${errors.join('; ')}`);
    }
    fillPayload(seq, payload);
    const extraCall = ep.call(payload, seq, allowance);
    if (extraCall >= 0) throw new Error(`rank 0: round ${round}: call ${perRound + 1} of the round went through although rank 1 held every reply (credit should be exhausted) ${describe()}`);
    ctx.poll(onResponse, onFailed);
    const st = ep.stats;
    roundStats.push({
      issued: seq - first, ringFull: st.ringFull - s0.ringFull, reads: st.reads - s0.reads, batchesReceived: st.batchesReceived - s0.batchesReceived,
      streaks, unblockedByRead, extraCall, earlyResponses: answered - answeredBefore,
    });
    sendEvent(rank, 'release-round', { expect: seq });
    await pollUntil(ctx, `round ${round}: all ${seq} responses`, () => answered === seq || errors.length > 0, phaseMs, describe, onResponse, onFailed);
    if (errors.length > 0) throw new Error(`rank 0: ${errors.join('; ')}`);
  }
  await pollUntil(ctx, 'the flag writes complete', () => ctx.rawPending === 0, phaseMs, describe);
  sendResult(rank, {
    perRound, total, answered, errors, rounds: roundStats, stats: { ...ep.stats }, state: ep.state,
    missing: total - seen.reduce((a, b) => a + b, 0), rawFailed: ctx.rawFailed,
  });
  await releasedP;
  ctx.close();
}

/**
 * A worker process of the copyrpc tests: `node worker.js <scenario> <rank> <n> <provider>
 * <json args>` (spawned by runScenario). Scenarios:
 *   stress     every rank calls every other rank at random with random payloads and answers
 *              in random order with random delays; every response is checked byte for byte
 *   request    the convenience layer: serve() on odd ranks, await ep.request() on even ones
 *   kill       rank 0 keeps requests pending toward rank 1, which the parent SIGKILLs
 *   wire, malformed: see wire-peer.ts (ranks speaking raw NIC verbs)
 *   onesided, readFallback: see onesided.ts (rdmaRead/rdmaWrite, the consumer READ)
 *   storeMesh  see store-mesh.ts (connectRpcMesh through a real store)
 *   earlyBatch see early.ts (batches that reach an endpoint before its connect())
 */
import { INSUFFICIENT_CREDIT, RING_FULL, type Endpoint, type RecvHandle } from '../../../src/rpc/index.js';
import type { WeftError } from '../../../src/errors.js';
import { fnv, joinRpcMesh, prng } from './mesh.js';
import { wireScenario, malformedScenario } from './wire-peer.js';
import { onesidedScenario, readFallbackScenario, type WorkerEnv } from './onesided.js';
import { storeMeshScenario } from './store-mesh.js';
import { earlyBatchScenario } from './early.js';
import { sendEvent, tick } from '../../../harness/worker-ipc.js';

const [scenario, rankS, nS, provider, argsJson] = process.argv.slice(2);
const rank = Number(rankS);
const n = Number(nS);
const args = JSON.parse(argsJson) as Record<string, number | string | boolean>;

let released = false;
const releasedP = new Promise<void>((resolve) => {
  process.on('message', (m: { type: string }) => {
    if (m.type === 'release') {
      released = true;
      resolve();
    }
  });
});

const event = (name: string, data?: unknown) => sendEvent(rank, name, data);

/** Request length: mostly small, sometimes up to 4 KiB. */
function pickLen(r: () => number, max: number): number {
  const x = r() % 100;
  const cap = x < 50 ? 64 : x < 90 ? 512 : 4096;
  return r() % (Math.min(cap, max) + 1);
}

/**
 * The request a (rank, seq) pair sends: length, response allowance, and bytes. Bytes 0..11
 * (when present) carry seq, rank and the response length the server must send.
 */
function makeRequest(src: number, seq: number, maxLen: number, maxAllow: number, out: Uint8Array): { len: number; allowance: number; respLen: number } {
  const r = prng(((src + 1) * 0x9e3779b1) ^ seq);
  const len = pickLen(r, maxLen);
  const allowance = 12 + (r() % (maxAllow - 12 + 1));
  const respLen = len >= 12 ? r() % (allowance + 1) : 8;
  const seed = r();
  for (let i = 0; i < len; i++) out[i] = (seed + i * 7) & 255;
  if (len >= 12) {
    const v = new DataView(out.buffer, out.byteOffset, 12);
    v.setUint32(0, seq, true);
    v.setUint32(4, src, true);
    v.setUint32(8, respLen, true);
  }
  return { len, allowance, respLen };
}

/** The server's answer: a function of the request bytes only. */
function makeResponse(req: Uint8Array, off: number, len: number, out: Uint8Array): number {
  const h = fnv(req, off, len);
  const v = new DataView(out.buffer, out.byteOffset, out.byteLength);
  if (len < 12) {
    v.setUint32(0, h, true);
    v.setUint32(4, len, true);
    return 8;
  }
  const respLen = req[off + 8] | (req[off + 9] << 8) | (req[off + 10] << 16) | (req[off + 11] << 24);
  for (let i = 0; i < respLen; i++) out[i] = (h + i * 13) & 255;
  if (respLen >= 4) v.setUint32(0, h, true);
  return respLen;
}

async function stress(): Promise<unknown> {
  const count = Number(args.count);
  const qd = Number(args.qd ?? 32);
  const ring = Number(args.ring ?? 32768);
  const debug = !!args.debug;
  const { ctx, eps } = await joinRpcMesh<number>(rank, n, provider, { debug, srqSize: 64 * n }, { sendRingSize: ring, recvRingSize: ring, recvCredits: 32 });
  const peers = eps.filter((e): e is Endpoint<number> => e !== undefined);
  const maxLen = Math.min(4096, peers[0].maxPayload);
  const maxAllow = Math.min(4096, peers[0].maxResponseAllowance);
  const r = prng(1000 + rank);
  const reqBuf = new Uint8Array(8192);
  const expBuf = new Uint8Array(8192);
  const respBuf = new Uint8Array(8192);
  const seen = new Uint8Array(count);
  const errors: string[] = [];
  let issued = 0;
  let answered = 0;
  let ringFull = 0;
  let noCredit = 0;
  let replied = 0;
  let maxOutstanding = 0;
  // Payload bytes are valid until the next poll: answers are computed when a request is taken.
  const held: { h: RecvHandle<number>; resp: Uint8Array; due: number }[] = [];
  const ready: { h: RecvHandle<number>; resp: Uint8Array }[] = [];
  const note = (e: string) => errors.length < 10 && errors.push(e);

  const onResponse = (seq: number, buf: Uint8Array, off: number, len: number) => {
    if (seq < 0 || seq >= count || seen[seq]) return note(`response for call ${seq} arrived twice or was never made`);
    seen[seq] = 1;
    answered++;
    const q = makeRequest(rank, seq, maxLen, maxAllow, reqBuf);
    const want = makeResponse(reqBuf, 0, q.len, expBuf);
    if (len !== want) return note(`call ${seq}: response of ${len} bytes, want ${want}`);
    for (let i = 0; i < len; i++) if (buf[off + i] !== expBuf[i]) return note(`call ${seq}: response byte ${i} differs`);
  };
  const onFailed = (_seq: number, err: WeftError) => note(`call failed: ${err.message}`);

  const pDelay = Number(args.pDelay ?? 0.05);
  const t0 = performance.now();
  let lastProgress = t0;
  let loops = 0;
  let doneSent = false;
  let warned = false;
  let lastTrace = t0;
  while (!released) {
    // Client: keep up to qd calls outstanding, toward random peers.
    const issuedBefore = issued;
    while (issued < count && issued - answered < qd) {
      const ep = peers[r() % peers.length];
      const q = makeRequest(rank, issued, maxLen, maxAllow, reqBuf);
      const id = ep.call(reqBuf.subarray(0, q.len), issued, q.allowance);
      if (id === RING_FULL) ringFull++;
      else if (id === INSUFFICIENT_CREDIT) noCredit++;
      if (id < 0) break;
      issued++;
    }
    if (issued - answered > maxOutstanding) maxOutstanding = issued - answered;
    const before = answered + replied;
    const k = ctx.poll(onResponse, onFailed);
    // Server: answer in random order; some answers wait a while.
    const now = performance.now();
    for (let h = ctx.recv(); h; h = ctx.recv()) {
      const resp = respBuf.slice(0, makeResponse(h.buffer, h.offset, h.length, respBuf));
      if (r() / 2 ** 32 < pDelay) held.push({ h, resp, due: now + (r() % 500) / 1000 });
      else ready.push({ h, resp });
    }
    for (let i = held.length - 1; i >= 0; i--) {
      if (held[i].due <= now) {
        ready.push(held[i]);
        held[i] = held[held.length - 1];
        held.pop();
      }
    }
    while (ready.length > 0) {
      const j = r() % ready.length;
      const { h, resp } = ready[j];
      ready[j] = ready[ready.length - 1];
      ready.pop();
      h.reply(resp);
      replied++;
    }
    if (answered + replied > before || k > 0) lastProgress = now;
    if (!doneSent && answered === count) {
      doneSent = true;
      const st = peers.map((e) => e.stats);
      const sum = (f: (s: (typeof st)[0]) => number) => st.reduce((a, s) => a + f(s), 0);
      process.send!({
        type: 'result',
        rank,
        result: {
          issued, answered, errors, ringFull, noCredit, maxOutstanding, seconds: (now - t0) / 1000,
          wrapsSent: sum((s) => s.wrapsSent), wrapsReceived: sum((s) => s.wrapsReceived), reads: sum((s) => s.reads),
          emptyBatches: sum((s) => s.emptyBatchesSent), batches: sum((s) => s.batchesSent), invariantChecks: sum((s) => s.invariantChecks),
          failed: peers.filter((e) => e.state !== 'ready').map((e) => e.error?.message),
        },
      });
    }
    if (errors.length > 0 && !doneSent) throw new Error(`rank ${rank}: ${errors.join('; ')}`);
    if ((now - lastProgress > 20_000 && !warned) || (args.trace && now - lastTrace > 5000)) {
      warned = now - lastProgress > 20_000;
      lastTrace = now;
      process.stderr.write(`rank ${rank} stuck: issued ${issued}, answered ${answered}, replied ${replied}, pending ${peers.map((e) => e.pendingCalls)} qp ${peers.map((e) => { const q = e.qp as any; return `${e.qp.state}/${e.qp.pendingOps} sq=${q.sq?.length} ring=${q.head}..${q.tail} verifying=${!!q.verifying} used=${q.used} grantFloor=${q.grantFloor} granted=${q.granted} ir=${q.inflightReads} iw=${q.inflightWrites}`; })}; ${peers.map((e) => JSON.stringify({ ...e.debugState(), ...e.stats })).join(' ')}\n`);
    }
    if (now - lastProgress > 30_000) throw new Error(`rank ${rank}: no progress for 30 s (deadlock?): issued ${issued}, answered ${answered}, replied ${replied}, held ${held.length}; ${peers.map((e) => JSON.stringify(e.debugState())).join(' ')}`);
    if ((++loops & 255) === 0) await tick();
    // Blocked (or done): let the CPU go to the peers (4 ranks share 2 cores) until something arrives.
    if (k === 0 && issued === issuedBefore && !args.spin) {
      try {
        await ctx.wait({ timeoutMs: held.length > 0 ? 1 : 10 });
      } catch (err) {
        // A timeout only means: loop again (held replies, release check).
        if ((err as WeftError).code !== 'ETIMEDOUT') throw err;
      }
    }
  }
  ctx.close();
  return undefined;
}

/** Convenience layer: odd ranks serve, even ranks await requests. */
async function request(): Promise<unknown> {
  const { ctx, eps } = await joinRpcMesh<unknown>(rank, n, provider, {}, { sendRingSize: 1 << 16, recvRingSize: 1 << 16 });
  if (rank % 2 === 1) {
    const server = ctx.serve(async (payload, h) => {
      if (payload[0] === 0xff) throw new Error('handler refused');
      if (payload[0] === 0xfe) await new Promise((r) => setTimeout(r, 5));
      const out = new Uint8Array(payload.length);
      for (let i = 0; i < payload.length; i++) out[i] = payload[i] ^ 0x55;
      if (payload[0] === 0xfc) {
        // A handler that replies through the handle, then returns later: by then the pooled
        // handle carries another request, which must not get this return value.
        h.reply(out);
        await new Promise((r) => setTimeout(r, 2));
        return Uint8Array.of(0xde, 0xad);
      }
      return out;
    }, { onError: () => {} });
    process.send!({ type: 'result', rank, result: { serving: true } });
    await releasedP;
    server.close();
    ctx.close();
    return undefined;
  }
  const ep = eps[rank + 1] as Endpoint<unknown>;
  const count = Number(args.count ?? 2000);
  let ok = 0;
  const wrong: string[] = [];
  const inflight = Number(args.concurrency ?? 16);
  let next = 0;
  const worker = async () => {
    while (next < count) {
      const i = next++;
      const len = i % 300;
      const payload = new Uint8Array(len).map((_, j) => (i + j) & 0xfd);
      if (i % 97 === 0 && len > 0) payload[0] = 0xfe;
      if (i % 89 === 0 && len > 0) payload[0] = 0xfc;
      const resp = await ep.request(payload, { timeoutMs: 10_000 });
      let good = resp.length === len;
      for (let j = 0; good && j < len; j++) if (resp[j] !== (payload[j] ^ 0x55)) good = false;
      if (good) ok++;
      else if (wrong.length < 5) wrong.push(`request ${i}: wrong response`);
    }
  };
  await Promise.all(Array.from({ length: inflight }, worker));
  // A throwing handler yields an empty response, not a hang.
  const refused = await ep.request(new Uint8Array([0xff, 1, 2]), { timeoutMs: 5000 });
  // An aborted request rejects with EABORTED.
  const ac = new AbortController();
  const aborted = ep.request(new Uint8Array(4), { timeoutMs: 5000, signal: ac.signal }).then(() => 'resolved', (e: WeftError) => e.code);
  ac.abort();
  const abortCode = await aborted;
  const result = { ok, wrong, refusedLength: refused.length, abortCode };
  process.send!({ type: 'result', rank, result });
  await releasedP;
  ctx.close();
  return undefined;
}

/** Rank 0 keeps requests pending toward rank 1 (which never answers); the parent kills rank 1. */
async function kill(): Promise<unknown> {
  const { ctx, eps } = await joinRpcMesh<unknown>(rank, n, provider, { opTimeoutMs: 10_000 }, { sendRingSize: 1 << 16, recvRingSize: 1 << 16 });
  if (rank === 1) {
    // Take requests but never answer: they stay pending at rank 0.
    for (;;) {
      ctx.poll();
      await new Promise((r) => setTimeout(r, 1));
      if (ctx.queuedRequests >= 8) event('kill-me');
    }
  }
  const ep = eps[1] as Endpoint<unknown>;
  const timeoutMs = Number(args.timeoutMs ?? 8000);
  const t0 = performance.now();
  const outcomes = await Promise.all(
    Array.from({ length: 8 }, (_, i) =>
      ep.request(new Uint8Array(16).fill(i), { timeoutMs, responseAllowance: 64 }).then(
        () => ({ ok: true, ms: performance.now() - t0, msg: '' }),
        (e: WeftError) => ({ ok: false, code: e.code, ms: performance.now() - t0, msg: e.message }),
      ),
    ),
  );
  // A request after the failure rejects at once, naming the endpoint.
  const late = await ep.request(new Uint8Array(4), { timeoutMs }).then(
    () => 'resolved',
    (e: WeftError) => `${e.code}: ${e.message}`,
  );
  const result = { outcomes, late, state: ep.state };
  process.send!({ type: 'result', rank, result });
  await releasedP;
  ctx.close();
  return undefined;
}

const env: WorkerEnv = { rank, n, provider, args, releasedP };

const scenarios: Record<string, () => Promise<unknown>> = {
  stress,
  request,
  kill,
  wire: () => wireScenario(rank, n, provider, args, releasedP),
  malformed: () => malformedScenario(rank, n, provider, args, releasedP),
  onesided: () => onesidedScenario(env),
  readFallback: () => readFallbackScenario(env),
  storeMesh: () => storeMeshScenario(env),
  earlyBatch: () => earlyBatchScenario(env),
};

scenarios[scenario]()
  .then(async () => {
    await releasedP;
    process.exit(0);
  })
  .catch((err: Error) => process.send!({ type: 'error', rank, message: err.stack ?? String(err) }, () => process.exit(1)));

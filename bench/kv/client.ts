/**
 * A client thread of a benchkv rank: closed loop over its pre-generated workload with at most
 * `qd` requests in flight (section 7 of the notes). A request for this rank goes by ipc to the
 * key's shard owner (`key % K`); a request for another rank goes
 *  - meta: by ipc to the key's shard owner too, which sends it on (Flux, copyrpc);
 *  - delegation: into daemon 0's delegationrpc ring (one hop);
 *  - direct: through this thread's own copyrpc endpoint toward that rank.
 * Then every channel is polled and each completion refills the pipeline.
 *
 * With --verify the keys are partitioned per client (key % G == this client's global index)
 * and a key with a request in flight is not issued again until it completes, so every get
 * must return this client's last completed put of the key (or the preloaded value).
 */
import { parentPort, workerData } from 'node:worker_threads';
import { startProfile } from './profile.js';
import { PollBackoff } from 'weftjs';
import { DelegationClient, IpcClient } from 'weftjs/delegation';
import { C, CLIENT_WORDS, CTL, D, LOOP_WORDS, LoopSampler, countBatch, region } from './board.js';
import type { KvConfig } from './config.js';
import { record } from './histogram.js';
import { GET_OK, KvMessage, KvWriter, OP_GET, OP_PUT, PUT_OK, REQUEST_BYTES, RESPONSE_BYTES } from './messages.js';
import { connectThread, endRunOnCallFailed, type SetupMessage } from './rpc-thread.js';
import { generate } from './workload.js';

interface ClientData {
  cfg: KvConfig;
  index: number;
  ctl: SharedArrayBuffer;
  clients: SharedArrayBuffer;
  loops: SharedArrayBuffer;
  ipcNames: string[];
  delegName?: string;
}

const data = workerData as ClientData;
const { cfg, index: me } = data;
const port = parentPort!;
const ctl = new Int32Array(data.ctl);
const stats = region(data.clients, CLIENT_WORDS, me);
const hist = stats.subarray(C.HIST);
const loopStats = region(data.loops, LOOP_WORDS, cfg.daemons + me);
const K = cfg.daemons;
const myRank = cfg.rank;
const who = `rank ${myRank} client ${me}`;
/** One request in this many has its round trip timed. */
const RTT_SAMPLE = 8;

function fail(what: string): never {
  throw new Error(`${who}: ${what}`);
}

const onCallFailed = endRunOnCallFailed(who);

// ---- set-up ------------------------------------------------------------------------------
const G = cfg.ranks * cfg.clients;
const g = myRank * cfg.clients + me;
const wl = generate({
  keys: cfg.keys,
  readRatio: cfg.readRatio,
  distribution: cfg.distribution,
  ranks: cfg.ranks,
  rank: myRank,
  locality: cfg.locality,
  seed: (cfg.seed * 7919 + g * 104729) >>> 0,
  partition: cfg.verify ? { index: g, count: G } : undefined,
  length: cfg.patternLength,
});
const opts = { requestBytes: REQUEST_BYTES, responseBytes: RESPONSE_BYTES, timeoutMs: cfg.timeoutMs };
const ipcs = data.ipcNames.map((n) => IpcClient.connect<number>(n, opts));
const deleg = cfg.backend === 'delegation' && cfg.ranks > 1 ? DelegationClient.connect<number>(data.delegName!, opts) : undefined;
const link = await connectThread(cfg, { role: 'client', index: me }, port);
const rpc = link?.rpc;
const eps = link?.eps ?? [];
port.postMessage({ type: 'ready' } satisfies SetupMessage);

// ---- per-request state -------------------------------------------------------------------
const qd = cfg.qd;
const started = new Float64Array(qd);
const slotKey = new Int32Array(qd);
const slotTarget = new Int32Array(qd);
const slotOp = new Uint8Array(qd);
const slotLo = new Uint32Array(qd);
const free: number[] = [];
for (let s = qd - 1; s >= 0; s--) free.push(s);
let inflight = 0;
let pos = 0;
let seq = 0;
let issued = 0;
const m = new KvMessage();
const w = new KvWriter();

// --verify: the expected value of each of this client's keys on each rank, and a busy flag.
const span = cfg.verify ? Math.ceil((cfg.keys - g) / G) : 0;
const expLo = new Uint32Array(cfg.verify ? cfg.ranks * span : 0);
const expHi = new Uint32Array(expLo.length);
const keyBusy = new Uint8Array(expLo.length);
if (cfg.verify) for (let r = 0; r < cfg.ranks; r++) for (let j = 0; j < span; j++) expLo[r * span + j] = g + G * j;

/** WEFT_KV_CRASH="<rank>:<client>" (tests only): that client throws after 2000 completions. */
const crashHere = process.env.WEFT_KV_CRASH === `${myRank}:${me}`;

function complete(slot: number, buf: Uint8Array, off: number): void {
  if (!m.readResponse(buf, off)) fail(`malformed response to a request for rank ${slotTarget[slot]}`);
  if (crashHere && stats[C.OPS] === 2000) fail('WEFT_KV_CRASH: injected failure');
  stats[C.OPS]++;
  if (slotTarget[slot] !== myRank) stats[C.REMOTE]++;
  else stats[C.LOCAL]++;
  const t = started[slot];
  if (t > 0) {
    if (Atomics.load(ctl, CTL.RECORD) !== 0) record(hist, (performance.now() - t) * 1e6);
    started[slot] = 0;
  }
  if (cfg.verify) check(slot);
  inflight--;
  free.push(slot);
}

function check(slot: number): void {
  const i = slotTarget[slot] * span + (slotKey[slot] - g) / G;
  keyBusy[i] = 0;
  if (slotOp[slot] === OP_PUT) {
    if (m.kind !== PUT_OK) stats[C.MISMATCH]++;
    expLo[i] = slotLo[slot];
    expHi[i] = g + 1;
  } else if (m.kind !== GET_OK || m.respLo !== expLo[i] || m.respHi !== expHi[i]) {
    stats[C.MISMATCH]++;
    if (stats[C.MISMATCH] <= 3) {
      console.error(`${who}: --verify: get(rank ${slotTarget[slot]}, key ${slotKey[slot]}) returned kind ${m.kind} value ${m.respHi}:${m.respLo}, expected ${expHi[i]}:${expLo[i]}`);
    }
  }
}

const onChannel = (slot: number, resp: Uint8Array): void => complete(slot, resp, 0);
/** Responses this loop's CQ poll delivered (the memo's batch; direct clients have no controller). */
let loopResponses = 0;
const onRpc = (slot: number, buf: Uint8Array, off: number): void => {
  loopResponses++;
  complete(slot, buf, off);
};

/** Issues the next request of the workload; false when its channel is full (or, verifying, its key is busy). */
function issue(): boolean {
  const target = wl.target[pos];
  const key = wl.key[pos];
  const read = wl.read[pos] !== 0;
  let vi = -1;
  if (cfg.verify) {
    vi = target * span + (key - g) / G;
    if (keyBusy[vi] !== 0) return false;
  }
  const slot = free[free.length - 1];
  const op = read ? OP_GET : OP_PUT;
  const lo = read ? 0 : seq + 1;
  const req = w.setRequest(op, target, key, 0, lo, read ? 0 : g + 1);
  let ok: boolean;
  if (target === myRank || cfg.backend === 'meta') ok = ipcs[key % K].call(req, slot);
  else if (deleg) ok = deleg.call(req, slot);
  else ok = eps[target]!.call(req, slot, RESPONSE_BYTES) >= 0;
  if (!ok) return false;
  free.pop();
  if (!read) seq++;
  slotKey[slot] = key;
  slotTarget[slot] = target;
  slotOp[slot] = op;
  slotLo[slot] = lo;
  started[slot] = ++issued % RTT_SAMPLE === 0 ? performance.now() : 0;
  if (vi >= 0) keyBusy[vi] = 1;
  inflight++;
  pos = pos + 1 === wl.key.length ? 0 : pos + 1;
  return true;
}

function pollAll(): number {
  let n = 0;
  for (let i = 0; i < ipcs.length; i++) n += ipcs[i].poll(onChannel);
  if (deleg) n += deleg.poll(onChannel);
  if (rpc) {
    loopResponses = 0;
    const k = rpc.poll(onRpc, onCallFailed);
    countBatch(loopStats, loopResponses, 0);
    loopStats[D.LOOPS]++;
    n += k;
  }
  return n;
}

// ---- run ---------------------------------------------------------------------------------
const startBy = Date.now() + cfg.timeoutMs;
while (Atomics.load(ctl, CTL.RUN) === 0 && Atomics.load(ctl, CTL.CLIENTS_STOP) === 0) {
  if (Date.now() > startBy) fail(`not started within ${cfg.timeoutMs} ms`);
  Atomics.wait(ctl, CTL.RUN, 0, 50);
}
const stopProfile = startProfile(who);
const backoff = new PollBackoff({ oversubscribed: cfg.oversubscribed });
const sampler = new LoopSampler(loopStats);
const outstanding = (): number => {
  let s = 0;
  for (const ep of link!.all) s += ep.pendingCalls;
  return s;
};
for (let loop = 1; ; loop++) {
  let work = 0;
  while (inflight < qd && issue()) work++;
  work += pollAll();
  if (work > 0) backoff.busy();
  else backoff.idle();
  if ((loop & 63) === 0) {
    loopStats[D.YIELDS] = backoff.yields;
    if (Atomics.load(ctl, CTL.CLIENTS_STOP) !== 0) break;
    if (rpc) sampler.maybeSample(outstanding, 0);
  }
}
// Drain what is in flight, then wait until every rank's clients are done before closing.
const drainBy = Date.now() + cfg.timeoutMs;
while (inflight > 0) {
  if (pollAll() === 0) {
    if (Date.now() > drainBy) fail(`${inflight} requests still unanswered ${cfg.timeoutMs} ms after the stop`);
    backoff.idle();
  }
}
stats[C.DRAINED] = 1;
while (Atomics.load(ctl, CTL.DAEMONS_STOP) === 0) {
  if (rpc) rpc.poll(undefined, onCallFailed);
  Atomics.wait(ctl, CTL.DAEMONS_STOP, 0, 5);
}
stopProfile();
rpc?.close();
deleg?.close();
for (const c of ipcs) c.close();
port.postMessage({ type: 'done' });

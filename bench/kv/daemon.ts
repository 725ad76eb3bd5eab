/**
 * A daemon thread of a benchkv rank: owns key shard `index`, serves its ipc clients, and takes
 * part in the daemons' Flux mesh; depending on the backend it also holds copyrpc endpoints
 * (meta: toward ranks p with p % K == index; delegation: daemon 0, all of them; direct: the
 * endpoints remote clients call) and, for delegation, daemon 0 owns the delegationrpc ring.
 *
 * The loop, in the notes' order (sections 5 and 6):
 *  1. copyrpc poll (responses go back to whoever asked: delegationrpc slot, ipc client, Flux
 *     caller) and recv (a request for this shard is served, another is forwarded through Flux
 *     to its owner with the RecvHandle parked until the answer comes back);
 *  2. delegationrpc poll/recv/advanceTail (daemon 0 of delegation): each entry becomes a
 *     copyrpc call with its DelegToken; RingFull / InsufficientCredit is retried after a
 *     nested poll whose responses wait in the nested-response buffer, then parked;
 *  3. ipc (this shard's local requests; for meta also the clients' remote requests, sent
 *     on from here or through Flux to the daemon that holds the endpoint);
 *  4. Flux poll (answers to what this daemon forwarded) and tryRecv (requests forwarded to it);
 *  then the backlogs are retried. A pass that found nothing goes through PollBackoff, weft's
 *  waiting loop for threads that poll several sources.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { startProfile } from './profile.js';
import { PollBackoff } from 'weftjs';
import { DelegationServer, FluxNode, IpcServer } from 'weftjs/delegation';
import { createPollController, type RecvHandle } from 'weftjs/rpc';
import { Backlog } from './backlog.js';
import { CTL, D, LOOP_WORDS, LoopSampler, countBatch, region } from './board.js';
import { DELEG_RING_DEPTH, FLUX_CAPACITY, FLUX_MAX_INFLIGHT, nextPow2, type KvConfig } from './config.js';
import { KvMessage, KvWriter, OP_PUT, PUT_OK, REQUEST_BYTES, RESPONSE_BYTES, TAG_REQ, TAG_RESP } from './messages.js';
import { connectThread, endRunOnCallFailed, nextMessage, type SetupMessage } from './rpc-thread.js';
import { KvShard, preload } from './shard.js';
import { T_DELEG, T_FLUX, T_HANDLE, T_IPC, kindOf, token, valueOf } from './tokens.js';

interface DaemonData {
  cfg: KvConfig;
  index: number;
  ctl: SharedArrayBuffer;
  loops: SharedArrayBuffer;
}

const { cfg, index: me, ctl: ctlSab, loops: loopSab } = workerData as DaemonData;
const port = parentPort!;
const ctl = new Int32Array(ctlSab);
const stats = region(loopSab, LOOP_WORDS, me);
const K = cfg.daemons;
const myRank = cfg.rank;
const who = `rank ${myRank} daemon ${me}`;
/** copyrpc calls retried after a nested poll before they go to the backlog (section 5). */
const CALL_RETRIES = 8;

// ---- set-up ------------------------------------------------------------------------------
const shard = new KvShard(Math.ceil(cfg.keys / K));
preload(shard, cfg.keys, K, me);
const depth = Math.max(2, nextPow2(cfg.qd));
const ipc = IpcServer.create({ job: cfg.job, maxClients: cfg.clients, depth, requestBytes: REQUEST_BYTES, responseBytes: RESPONSE_BYTES });
let flux: FluxNode<number> | undefined =
  K > 1 && me === 0 ? FluxNode.create<number>({ job: cfg.job, nodes: K, capacity: FLUX_CAPACITY, maxInflight: FLUX_MAX_INFLIGHT, payloadBytes: REQUEST_BYTES }) : undefined;
const deleg =
  cfg.backend === 'delegation' && me === 0
    ? DelegationServer.create({ job: cfg.job, maxClients: cfg.clients, ringDepth: DELEG_RING_DEPTH, respDepth: depth, requestBytes: REQUEST_BYTES, responseBytes: RESPONSE_BYTES })
    : undefined;
port.postMessage({ type: 'names', ipc: ipc.name, flux: flux?.name, deleg: deleg?.name } satisfies SetupMessage);
const joined = await nextMessage<{ flux?: string }>(port, 'flux');
if (K > 1 && me !== 0) flux = FluxNode.join<number>(joined.flux!, me);
const link = await connectThread(cfg, { role: 'daemon', index: me }, port);
const rpc = link?.rpc;
const eps = link?.eps ?? [];
port.postMessage({ type: 'ready' } satisfies SetupMessage);

// ---- per-message state (made once) -------------------------------------------------------
const m = new KvMessage();
const w = new KvWriter();
/** RecvHandles parked while their request visits another shard through Flux. */
const handles: (RecvHandle<number> | undefined)[] = [];
const freeHandles: number[] = [];
const callBacklog = new Backlog();
const fluxBacklog = new Backlog();
/** The nested-response buffer of section 5: responses met while retrying a call. */
const nestedTokens = new Float64Array(4096);
const nestedBytes = new Uint8Array(4096 * RESPONSE_BYTES);
let nested = 0;

function fail(what: string): never {
  throw new Error(`${who}: ${what}`);
}

const onCallFailed = endRunOnCallFailed(who);

function parkHandle(h: RecvHandle<number>): number {
  const i = freeHandles.length > 0 ? freeHandles.pop()! : handles.length;
  handles[i] = h;
  return i;
}

/** Sends the 16 response bytes at `buf[off]` to whoever `t` names. */
function answer(t: number, buf: Uint8Array, off: number): void {
  const kind = kindOf(t);
  const v = valueOf(t);
  if (kind === T_DELEG) {
    const client = v >>> 16;
    const slot = v & 0xffff;
    const dst = deleg!.responseView(client, slot);
    for (let b = 0; b < RESPONSE_BYTES; b++) dst[b] = buf[off + b];
    dst[3] = 0;
    deleg!.reply(client, slot);
  } else if (kind === T_IPC) {
    const client = v >>> 16;
    const dst = ipc.responseView(client);
    for (let b = 0; b < RESPONSE_BYTES; b++) dst[b] = buf[off + b];
    dst[3] = 0;
    ipc.reply(client, v & 0xffff);
  } else if (kind === T_FLUX) {
    const r = w.response;
    for (let b = 0; b < RESPONSE_BYTES; b++) r[b] = buf[off + b];
    r[3] = TAG_RESP;
    flux!.reply(v, r);
  } else if (kind === T_HANDLE) {
    const h = handles[v];
    if (h === undefined) fail(`a Flux reply names parked request ${v}, which is not parked`);
    handles[v] = undefined;
    freeHandles.push(v);
    const r = w.response;
    for (let b = 0; b < RESPONSE_BYTES; b++) r[b] = buf[off + b];
    r[3] = 0;
    h.reply(r);
  } else fail(`unknown token kind ${kind}`);
}

// ---- poll control (docs/bistability.md) ---------------------------------------------------
/** The loop's poll controller: extra CQ polls (budgets) or a hold of client responses (batch-hold). */
// direct's daemons only serve (their endpoints belong to remote clients): they make no calls,
// so a controller has nothing to wait for, and the row says n/a.
const control = createPollController(cfg.backend === 'direct' ? 'none' : cfg.pollController, { batchTarget: Math.max(1, cfg.ranks - 1) });
/** The adaptive budgets want loop times and RTT samples; the others need no clock per loop. */
const timesLoops = control.kind === 'adaptive' || control.kind === 'min-batch';
const holds = control.kind === 'batch-hold';
/** Responses delivered by this loop's CQ polls (the memo's batch). */
let loopResponses = 0;
let loopT0 = 0;
/** copyrpc calls this daemon has in flight (min-batch waits for at most a quarter of them; checked against the endpoints at shutdown). */
let inFlight = 0;
/** One sampled call at a time for the RTT the adaptive budgets divide by. */
let rttToken = -1;
let rttStart = 0;
/** batch-hold: client responses waiting to go out together (at most every client's window). */
const HOLD_MAX = cfg.clients * depth;
const heldTokens = new Float64Array(HOLD_MAX);
const heldBytes = new Uint8Array(HOLD_MAX * RESPONSE_BYTES);
let held = 0;
let heldSince = 0;

/** A copyrpc response: to its client now, or into the hold buffer while batch-hold holds. */
function respond(t: number, buf: Uint8Array, off: number): void {
  loopResponses++;
  inFlight--;
  if (t === rttToken) {
    control.rtt((performance.now() - rttStart) * 1000);
    rttToken = -1;
  }
  if (holds && control.shouldHold()) {
    const kind = kindOf(t);
    if (kind === T_DELEG || kind === T_IPC) {
      if (held === HOLD_MAX) fail('the batch-hold buffer overflowed');
      if (held === 0) heldSince = performance.now();
      heldTokens[held] = t;
      const base = held * RESPONSE_BYTES;
      for (let b = 0; b < RESPONSE_BYTES; b++) heldBytes[base + b] = buf[off + b];
      held++;
      return;
    }
  }
  answer(t, buf, off);
}

/** End of a loop holding responses: out they go when the controller says so. */
function maybeRelease(): void {
  const heldUs = (performance.now() - heldSince) * 1000;
  if (!control.shouldRelease(held, heldUs, inFlight)) return;
  const n = held;
  held = 0;
  for (let i = 0; i < n; i++) answer(heldTokens[i], heldBytes, i * RESPONSE_BYTES);
  control.released(n, heldUs);
}

const onResponse = (t: number, buf: Uint8Array, off: number, len: number): void => {
  if (len < RESPONSE_BYTES) fail(`a copyrpc response of ${len} bytes (expected ${RESPONSE_BYTES})`);
  respond(t, buf, off);
};
const onNestedResponse = (t: number, buf: Uint8Array, off: number): void => {
  if (nested === nestedTokens.length) fail('the nested-response buffer overflowed');
  nestedTokens[nested] = t;
  const base = nested * RESPONSE_BYTES;
  for (let b = 0; b < RESPONSE_BYTES; b++) nestedBytes[base + b] = buf[off + b];
  nested++;
};
const onFluxReply = (t: number, reply: Uint8Array): void => answer(t, reply, 0);

/** copyrpc call toward `target`, retried after nested polls (section 5), else false. */
function tryCall(target: number, payload: Uint8Array, t: number, retries: number): boolean {
  const ep = eps[target];
  if (ep === undefined) fail(`no copyrpc endpoint toward rank ${target} in this daemon (backend ${cfg.backend})`);
  for (let i = 0; ; i++) {
    if (ep.call(payload, t, RESPONSE_BYTES) >= 0) {
      inFlight++;
      return true;
    }
    if (i >= retries) return false;
    rpc!.poll(onNestedResponse, onCallFailed);
  }
}

function callRemote(target: number, payload: Uint8Array, t: number): void {
  if (callBacklog.size > 0 || !tryCall(target, payload, t, CALL_RETRIES)) {
    callBacklog.push(target, payload, t);
    stats[D.BACKLOGGED]++;
  } else if (timesLoops && rttToken < 0) {
    rttToken = t;
    rttStart = performance.now();
  }
  if (nested > 0) drainNested();
}

function drainNested(): void {
  const n = nested;
  nested = 0;
  for (let i = 0; i < n; i++) respond(nestedTokens[i], nestedBytes, i * RESPONSE_BYTES);
}

function fluxCall(target: number, payload: Uint8Array, t: number): void {
  if (fluxBacklog.size > 0 || !flux!.call(target, payload, t)) {
    fluxBacklog.push(target, payload, t);
    stats[D.BACKLOGGED]++;
  }
}

/**
 * WEFT_KV_FAULT=N (tests only): every Nth put is acknowledged but not stored, so --verify
 * has something to find; the test of --verify checks that it does.
 */
const FAULT_EVERY = Number(process.env.WEFT_KV_FAULT ?? 0);
let puts = 0;

/** Serves a decoded request for this shard and returns the response bytes. */
function serve(tag: number): Uint8Array {
  stats[D.SERVED]++;
  if (FAULT_EVERY > 0 && m.op === OP_PUT && ++puts % FAULT_EVERY === 0) return w.setResponse(PUT_OK, 0, 0, tag);
  return shard.handle(m, w, tag);
}

// ---- the four phases ---------------------------------------------------------------------
function phaseRpc(): number {
  let n = rpc!.poll(onResponse, onCallFailed);
  for (let i = 0; i < control.extraPolls && loopResponses < control.pollUntil; i++) n += rpc!.poll(onResponse, onCallFailed);
  for (let h = rpc!.recv(); h !== undefined; h = rpc!.recv()) {
    n++;
    if (h.length < REQUEST_BYTES || !m.readRequest(h.buffer, h.offset)) fail(`malformed copyrpc request from ${h.endpoint.peerLabel}`);
    if (m.rank !== myRank) fail(`a request for rank ${m.rank} arrived at rank ${myRank} from ${h.endpoint.peerLabel}`);
    const owner = m.keyLo % K;
    if (owner === me) h.reply(serve(0));
    else fluxCall(owner, w.setRequestFrom(m, TAG_REQ), token(T_HANDLE, parkHandle(h)));
  }
  return n;
}

function phaseDeleg(): number {
  const d = deleg!;
  if (d.poll() === 0) return 0;
  let n = 0;
  for (let e = d.recv(); e !== null; e = d.recv()) {
    n++;
    if (!m.readRequest(e.payload)) fail(`malformed delegationrpc request from client ${e.clientId}`);
    callRemote(m.rank, e.payload, token(T_DELEG, e.clientId * 0x10000 + e.respSlot));
  }
  d.advanceTail();
  return n;
}

function phaseIpc(): number {
  let n = 0;
  for (let q = ipc.recv(); q !== null; q = ipc.recv()) {
    n++;
    if (!m.readRequest(q.payload)) fail(`malformed ipc request from client ${q.clientId}`);
    if (m.rank === myRank) {
      const r = serve(0);
      ipc.responseView(q.clientId).set(r);
      ipc.reply(q.clientId, q.tag);
      continue;
    }
    // meta: a client's remote request; the endpoint toward rank p lives in daemon p % K.
    const t = token(T_IPC, q.clientId * 0x10000 + q.tag);
    const holder = cfg.backend === 'meta' ? m.rank % K : -1;
    if (holder === me) callRemote(m.rank, q.payload, t);
    else if (holder >= 0) fluxCall(holder, w.setRequestFrom(m, TAG_REQ), t);
    else fail(`client ${q.clientId} sent a request for rank ${m.rank} over ipc (backend ${cfg.backend} sends remote requests another way)`);
  }
  return n;
}

function phaseFlux(): number {
  const f = flux!;
  let n = f.poll(onFluxReply);
  for (let r = f.tryRecv(); r !== null; r = f.tryRecv()) {
    n++;
    if (!m.readRequest(r.payload) || m.bytes[3] !== TAG_REQ) fail(`malformed Flux request from daemon ${r.from}`);
    if (m.rank === myRank) f.reply(r.replyToken, serve(TAG_RESP));
    else callRemote(m.rank, r.payload, token(T_FLUX, r.replyToken));
  }
  return n;
}

const sendFlux = (target: number, payload: Uint8Array, t: number): boolean => flux!.call(target, payload, t);
const sendCall = (target: number, payload: Uint8Array, t: number): boolean => tryCall(target, payload, t, 0);

/** The calls in flight, for the sampler (counted per call and answer: no sum over endpoints). */
const outstanding = (): number => inFlight;

/** The endpoints' own count of calls in flight, which `inFlight` must agree with. */
function pendingOnEndpoints(): number {
  let s = 0;
  if (link) for (const ep of link.all) s += ep.pendingCalls;
  return s;
}

// ---- run ---------------------------------------------------------------------------------
const deadline = Date.now() + cfg.timeoutMs;
while (Atomics.load(ctl, CTL.RUN) === 0 && Atomics.load(ctl, CTL.DAEMONS_STOP) === 0) {
  if (Date.now() > deadline) fail(`not started within ${cfg.timeoutMs} ms`);
  Atomics.wait(ctl, CTL.RUN, 0, 50);
}

const stopProfile = startProfile(who);
const backoff = new PollBackoff({ oversubscribed: cfg.oversubscribed });
const sampler = new LoopSampler(stats);
loopT0 = performance.now();
for (let loop = 1; ; loop++) {
  let work = 0;
  loopResponses = 0;
  if (rpc) work += phaseRpc();
  if (deleg) work += phaseDeleg();
  work += phaseIpc();
  if (flux) work += phaseFlux();
  if (callBacklog.size > 0) work += callBacklog.drain(sendCall);
  if (fluxBacklog.size > 0) work += fluxBacklog.drain(sendFlux);
  if (nested > 0) drainNested();
  if (rpc) {
    if (held > 0) maybeRelease();
    let loopUs = 0;
    if (timesLoops) {
      const now = performance.now();
      loopUs = (now - loopT0) * 1000;
      loopT0 = now;
      if (rttToken >= 0 && now - rttStart > 1000) rttToken = -1; // a lost sample must not stop sampling
    }
    control.endLoop(loopResponses, loopUs, inFlight);
    countBatch(stats, loopResponses, control.setting);
  }
  stats[D.LOOPS]++;
  if (held > 0) work++; // held responses are work: no sleeping past the hold
  if (work > 0) backoff.busy();
  else backoff.idle();
  if ((loop & 63) === 0) {
    stats[D.YIELDS] = backoff.yields;
    if (Atomics.load(ctl, CTL.DAEMONS_STOP) !== 0) break;
    if (rpc) sampler.maybeSample(outstanding, control.setting);
  }
}

stopProfile();
if (held > 0) fail(`${held} responses still held at shutdown`);
// The count the poll controller was given must be the endpoints' (a drift is a bench bug).
if (rpc && inFlight !== pendingOnEndpoints()) fail(`counted ${inFlight} copyrpc calls in flight at shutdown, the endpoints hold ${pendingOnEndpoints()}`);
rpc?.close();
deleg?.close();
flux?.close();
ipc.close();
port.postMessage({ type: 'done' });

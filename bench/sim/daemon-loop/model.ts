/**
 * A deterministic discrete-event model of the delegation daemon loop of the CQE batching memo:
 * NP ranks, one daemon each, clients x QD closed-loop requests to remote ranks.
 *
 * Each daemon runs the memo's steps in order: A IPC poll, B delegation ring poll (the client
 * requests that are ready), C CQ poll and callbacks (responses go to their clients, requests
 * are served and their replies queued), D call issue, E backlog drain, F flush (one WRITE per
 * endpoint with something to send), G backlog drain; the poll controller decides how many
 * extra CQ polls step C makes and whether responses wait in a hold buffer. Every step costs
 * daemon time (params.ts). A WRITE occupies its connection (rank to rank, in order) for
 * `writeUs + messages * messageUs` and lands `rttUs / 2` after it started plus an exponential
 * jitter; the remote daemon serves a request when its loop next polls.
 *
 * Simulation: the only thing a daemon reads from another rank is its CQ, so every CQ poll is
 * an event and the daemon with the earliest poll runs next; what it does until its next poll
 * reads only its own state. A WRITE lands at least rtt/2 after it was posted, so no poll
 * already run can have missed it (a conservative parallel-DES argument, done sequentially).
 * Seeded xorshift32 per rank: the same parameters give the same numbers on every machine.
 */
import { createPollController, type PollController } from 'weftjs/rpc';
import type { DaemonLoopParams } from './params.js';

/** Per (NP, controller): what the memo's table reports, plus the histogram and the series. */
export interface SimResult {
  np: number;
  controller: string;
  /** Requests answered per second over the measured window, all ranks, millions. */
  mopsTotal: number;
  mopsPerRank: number;
  /** Calls in flight per rank (time average). */
  outstandingAvg: number;
  /** Responses per loop, over all loops (the memo's "CQE batch"). */
  batchAvg: number;
  /** Share of loops with 0, 1, 2-10, 11-100 and more than 100 responses. */
  batchHist: [number, number, number, number, number];
  loopsPerS: number;
  /** Mean loop time, us. */
  loopUs: number;
  /** Mean WRITE size, messages. */
  messagesPerWrite: number;
  /** Request round trip seen by clients, us (mean). */
  latencyUs: number;
  /** The controller's setting, time average (extra polls, or hold us for batch-hold). */
  settingAvg: number;
  settingUnit: 'polls' | 'us';
  /** Induced collapse: when the stalled clients start coming back, us (null: none induced). */
  restartUs: number | null;
  /** Batch average in the 200 us after the clients are all back (low: the restart collapsed). */
  afterStallBatch: number | null;
  /** Simulated events (CQ polls) and wall time, for the record. */
  polls: number;
  wallMs: number;
  series: SimSeries;
}

/** Time series over bins of `binUs` (fine up to seriesMs, then 10x coarser to the end). */
export interface SimSeries {
  /** Bin start, us. */
  t: number[];
  /** Responses per loop of the loops that started in the bin, all ranks (null: none started). */
  batch: (number | null)[];
  /** The same for rank 0 alone. */
  batch0: (number | null)[];
  /** Calls in flight per rank (time average over the loops that started in the bin). */
  outstanding: (number | null)[];
  /** Requests answered per second per rank in the bin, millions. */
  mops: number[];
  /** Controller setting (rank average). */
  setting: (number | null)[];
}

// Message encoding in a connection's ring: slot * 2 + kind.
const REQUEST = 0;
const RESPONSE = 1;

/** A binary min-heap of (time, value) pairs over growable typed arrays. */
class TimeHeap {
  keys: Float64Array;
  vals: Int32Array;
  size = 0;
  constructor(capacity: number) {
    this.keys = new Float64Array(capacity);
    this.vals = new Int32Array(capacity);
  }
  push(key: number, val: number): void {
    if (this.size === this.keys.length) {
      const k = new Float64Array(this.size * 2);
      k.set(this.keys);
      const v = new Int32Array(this.size * 2);
      v.set(this.vals);
      this.keys = k;
      this.vals = v;
    }
    const keys = this.keys;
    const vals = this.vals;
    let i = this.size++;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (keys[parent] <= key) break;
      keys[i] = keys[parent];
      vals[i] = vals[parent];
      i = parent;
    }
    keys[i] = key;
    vals[i] = val;
  }
  /** Removes the top; read `topKey`/`topVal` before. */
  pop(): void {
    const keys = this.keys;
    const vals = this.vals;
    const n = --this.size;
    if (n === 0) return;
    const key = keys[n];
    const val = vals[n];
    let i = 0;
    for (;;) {
      let c = 2 * i + 1;
      if (c >= n) break;
      if (c + 1 < n && keys[c + 1] < keys[c]) c++;
      if (keys[c] >= key) break;
      keys[i] = keys[c];
      vals[i] = vals[c];
      i = c;
    }
    keys[i] = key;
    vals[i] = val;
  }
}

function nextPow2(n: number): number {
  let p = 1;
  while (p < n) p *= 2;
  return p;
}

/**
 * Runs one (params, controller) pair. `controller` is a spec of `createPollController`; the
 * batch-hold target is NP - 1 (the endpoints of a daemon: "about NP" in the notes).
 */
export function simulate(p: DaemonLoopParams, controller: string): SimResult {
  const wall0 = performance.now();
  const NP = p.np;
  const Q = p.clients * p.qd;
  const P = NP * NP;
  const cap = nextPow2(2 * Q + 2);
  const mask = cap - 1;
  const end = p.durationMs * 1000;
  const measureFrom = p.warmupMs * 1000;
  const collapseFrom = p.collapseForMs > 0 ? p.collapseAtMs * 1000 : Infinity;
  const collapseTo = p.collapseForMs > 0 ? (p.collapseAtMs + p.collapseForMs) * 1000 : Infinity;
  const ringTake = p.ringTakeMax > 0 ? p.ringTakeMax : Infinity;
  const flightUs = p.rttUs / 2;

  // connections (src * NP + dst): message ring, WRITE ring, occupancy
  const msgs = new Int32Array(P * cap);
  const mHead = new Float64Array(P);
  const mFlushed = new Float64Array(P);
  const mTail = new Float64Array(P);
  const wCount = new Int32Array(P * cap);
  const wHead = new Float64Array(P);
  const wTail = new Float64Array(P);
  const busyUntil = new Float64Array(P);
  const lastArrival = new Float64Array(P);
  const cq: TimeHeap[] = [];
  for (let r = 0; r < NP; r++) cq.push(new TimeHeap(1024));

  // ranks
  const ctl: PollController[] = [];
  for (let r = 0; r < NP; r++) ctl.push(createPollController(controller, { batchTarget: Math.max(1, NP - 1), rttUs: p.rttUs }));
  const rng = new Uint32Array(NP);
  for (let r = 0; r < NP; r++) rng[r] = (p.seed * 2654435761 + r * 40503 + 1) >>> 0 || 1;
  const target = new Int32Array(NP * Q);
  const callTime = new Float64Array(NP * Q);
  /** Each rank's client requests by the time they are written (the delegation ring, in time order). */
  const ring: TimeHeap[] = [];
  for (let r = 0; r < NP; r++) ring.push(new TimeHeap(Q));
  const picked = new Int32Array(NP * Q);
  const pickedN = new Int32Array(NP);
  const held = new Int32Array(NP * Q);
  const heldN = new Int32Array(NP);
  const heldSince = new Float64Array(NP);
  const dirty = new Int32Array(NP * NP);
  const dirtyN = new Int32Array(NP);
  const isDirty = new Uint8Array(P);
  const outstanding = new Int32Array(NP);
  const loopStart = new Float64Array(NP);
  const loopBatch = new Int32Array(NP);
  const loopPolls = new Int32Array(NP);
  const loopOut = new Int32Array(NP);

  // metrics (measured window)
  let loops = 0;
  let responses = 0;
  let answered = 0;
  let latencySum = 0;
  let writes = 0;
  let writeMsgs = 0;
  let outInt = 0;
  let settingInt = 0;
  /** Loop time summed over the measured loops, us. */
  let timeInt = 0;
  let polls = 0;
  const hist = new Float64Array(5);
  // series
  const fineBins = Math.ceil((p.seriesMs * 1000) / p.binUs);
  const coarseUs = p.binUs * 10;
  const coarseBins = Math.max(0, Math.ceil((end - fineBins * p.binUs) / coarseUs));
  const nBins = fineBins + coarseBins;
  const sLoops = new Float64Array(nBins);
  const sResp = new Float64Array(nBins);
  const sLoops0 = new Float64Array(nBins);
  const sResp0 = new Float64Array(nBins);
  const sOut = new Float64Array(nBins);
  const sSet = new Float64Array(nBins);
  const sTime = new Float64Array(nBins);
  const sAnswered = new Float64Array(nBins);
  const fineEnd = fineBins * p.binUs;
  const binOf = (t: number): number => {
    const b = t < fineEnd ? Math.floor(t / p.binUs) : fineBins + Math.floor((t - fineEnd) / coarseUs);
    return b < nBins ? b : nBins - 1;
  };
  const binWidth = (b: number): number => (b < fineBins ? p.binUs : coarseUs);

  function random(r: number): number {
    let x = rng[r];
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    rng[r] = x;
    return x / 4294967296;
  }

  /** A client of rank r sends its next request (slot) at time t. */
  function issue(r: number, slot: number, t: number): void {
    let dst: number;
    if (p.hotShare > 0 && r !== 0 && random(r) < p.hotShare) dst = 0;
    else {
      dst = Math.floor(random(r) * (NP - 1));
      if (dst >= r) dst++;
    }
    target[r * Q + slot] = dst;
    ring[r].push(t, slot);
  }

  function append(src: number, dst: number, msg: number): void {
    const c = src * NP + dst;
    msgs[c * cap + (mTail[c] & mask)] = msg;
    mTail[c]++;
    if (isDirty[c] === 0) {
      isDirty[c] = 1;
      dirty[src * NP + dirtyN[src]++] = dst;
    }
  }

  function deliver(r: number, slot: number, t: number): void {
    if (t >= measureFrom) {
      answered++;
      latencySum += t - callTime[r * Q + slot];
    }
    sAnswered[binOf(t)]++;
    const next = t + p.clientUs;
    // Induced collapse: clients stall in the window and come back thinly, over startSpreadUs.
    if (next >= collapseFrom && next < collapseTo) issue(r, slot, collapseTo + random(r) * p.startSpreadUs);
    else issue(r, slot, next);
  }

  function release(r: number, t: number, c: PollController): void {
    const n = heldN[r];
    for (let i = 0; i < n; i++) deliver(r, held[r * Q + i], t);
    heldN[r] = 0;
    c.released(n, t - heldSince[r]);
  }

  /** Steps A and B of the next loop, from time t; returns the time of its CQ poll. */
  function beginLoop(r: number, t: number): number {
    loopStart[r] = t;
    loopOut[r] = outstanding[r];
    loopBatch[r] = 0;
    loopPolls[r] = 0;
    t += p.ipcUs + p.ringUs;
    // B: the requests clients have written by now
    let n = 0;
    const base = r * Q;
    const h = ring[r];
    while (h.size > 0 && h.keys[0] <= t && n < ringTake) {
      picked[base + n++] = h.vals[0];
      h.pop();
    }
    pickedN[r] = n;
    return t;
  }

  /** Step C: one CQ poll at time t; returns the time after its callbacks. */
  function poll(r: number, t: number): number {
    polls++;
    const c = ctl[r];
    const heap = cq[r];
    const seen = t;
    t += p.pollUs;
    while (heap.size > 0 && heap.keys[0] <= seen) {
      const src = heap.vals[0];
      heap.pop();
      const conn = src * NP + r;
      const count = wCount[conn * cap + (wHead[conn] & mask)];
      wHead[conn]++;
      t += p.cqeUs;
      for (let k = 0; k < count; k++) {
        const msg = msgs[conn * cap + (mHead[conn] & mask)];
        mHead[conn]++;
        const slot = msg >> 1;
        if ((msg & 1) === REQUEST) {
          t += p.requestUs;
          append(r, src, slot * 2 + RESPONSE);
        } else {
          t += p.responseUs;
          outstanding[r]--;
          loopBatch[r]++;
          c.rtt(t - callTime[r * Q + slot]);
          if (c.shouldHold()) {
            if (heldN[r] === 0) heldSince[r] = t;
            held[r * Q + heldN[r]++] = slot;
          } else deliver(r, slot, t);
        }
      }
    }
    loopPolls[r]++;
    return t;
  }

  /** Steps D to G and the loop's bookkeeping; returns the time the next loop starts. */
  function finishLoop(r: number, t: number): number {
    const c = ctl[r];
    // D: calls for the requests taken in step B
    const base = r * Q;
    const n = pickedN[r];
    for (let i = 0; i < n; i++) {
      const slot = picked[base + i];
      t += p.callUs;
      append(r, target[base + slot], slot * 2 + REQUEST);
      callTime[base + slot] = t;
    }
    outstanding[r] += n;
    pickedN[r] = 0;
    // E: no RingFull in the model (rings and credit are sized for QD), nothing to drain
    // F: flush, one WRITE per endpoint with something to send
    t += p.flushUs;
    const dn = dirtyN[r];
    for (let i = 0; i < dn; i++) {
      const dst = dirty[r * NP + i];
      const conn = r * NP + dst;
      isDirty[conn] = 0;
      const count = mTail[conn] - mFlushed[conn];
      mFlushed[conn] = mTail[conn];
      t += p.postUs;
      // The connection starts a WRITE when its previous one is done with it; the WRITE lands
      // half a round trip (plus its messages and the jitter) after it starts.
      const start = t > busyUntil[conn] ? t : busyUntil[conn];
      const bytesUs = count * p.messageUs;
      busyUntil[conn] = start + p.writeUs + bytesUs;
      const u = random(r);
      let arrival = start + flightUs + bytesUs - p.jitterUs * Math.log(1 - u);
      if (arrival < lastArrival[conn]) arrival = lastArrival[conn];
      lastArrival[conn] = arrival;
      wCount[conn * cap + (wTail[conn] & mask)] = count;
      wTail[conn]++;
      cq[dst].push(arrival, r);
      if (t >= measureFrom) {
        writes++;
        writeMsgs += count;
      }
    }
    dirtyN[r] = 0;
    // G: nothing parked. Then the hold buffer (batch-hold), at the loop's end as in the notes.
    if (heldN[r] > 0 && c.shouldRelease(heldN[r], t - heldSince[r], outstanding[r])) release(r, t, c);
    const batch = loopBatch[r];
    const dt = t - loopStart[r];
    c.endLoop(batch, dt, outstanding[r]);
    // metrics
    const s = loopStart[r];
    const setting = c.setting;
    const out = (loopOut[r] + outstanding[r]) / 2;
    if (s >= measureFrom) {
      loops++;
      responses += batch;
      hist[batch === 0 ? 0 : batch === 1 ? 1 : batch <= 10 ? 2 : batch <= 100 ? 3 : 4]++;
      outInt += out * dt;
      settingInt += setting * dt;
      timeInt += dt;
    }
    const b = binOf(s);
    sLoops[b]++;
    sResp[b] += batch;
    if (r === 0) {
      sLoops0[b]++;
      sResp0[b] += batch;
    }
    sOut[b] += out * dt;
    sSet[b] += setting * dt;
    sTime[b] += dt;
    return t;
  }

  // Start: every client slot writes its first request (the memo's synchronous burst, or spread).
  for (let r = 0; r < NP; r++) {
    const burst = Math.min(Q, p.startBurst);
    for (let slot = 0; slot < Q; slot++) issue(r, slot, slot < burst || p.startSpreadUs <= 0 ? 0 : ((slot - burst + 1) / (Q - burst)) * p.startSpreadUs);
  }
  // The scheduler: ranks by the time of their next CQ poll.
  const ranks = new TimeHeap(NP);
  for (let r = 0; r < NP; r++) {
    ranks.push(beginLoop(r, 0), r);
  }
  while (ranks.size > 0) {
    const r = ranks.vals[0];
    let t = ranks.keys[0];
    ranks.pop();
    if (t >= end) continue;
    t = poll(r, t);
    const c = ctl[r];
    if (loopBatch[r] < c.pollUntil && loopPolls[r] <= c.extraPolls) {
      ranks.push(t, r);
      continue;
    }
    t = finishLoop(r, t);
    ranks.push(beginLoop(r, t), r);
  }

  // results
  const window = (end - measureFrom) / 1e6;
  const series: SimSeries = { t: [], batch: [], batch0: [], outstanding: [], mops: [], setting: [] };
  let t0 = 0;
  for (let b = 0; b < nBins; b++) {
    const w = binWidth(b);
    series.t.push(t0);
    series.batch.push(sLoops[b] > 0 ? sResp[b] / sLoops[b] : null);
    series.batch0.push(sLoops0[b] > 0 ? sResp0[b] / sLoops0[b] : null);
    series.outstanding.push(sTime[b] > 0 ? sOut[b] / sTime[b] : null);
    series.mops.push(sAnswered[b] / NP / w);
    series.setting.push(sTime[b] > 0 ? sSet[b] / sTime[b] : null);
    t0 += w;
  }
  // The batch once the stalled clients are all back (after the restart's spread), 200 us long.
  let afterStallBatch: number | null = null;
  if (Number.isFinite(collapseTo) && collapseTo + p.startSpreadUs + 200 <= end) {
    let sl = 0;
    let sr = 0;
    const from = collapseTo + p.startSpreadUs;
    for (let i = 0; i < nBins; i++) {
      if (series.t[i] >= from && series.t[i] < from + 200) {
        sl += sLoops[i];
        sr += sResp[i];
      }
    }
    afterStallBatch = sl > 0 ? sr / sl : 0;
  }
  return {
    np: NP,
    controller,
    mopsTotal: answered / window / 1e6,
    mopsPerRank: answered / window / 1e6 / NP,
    outstandingAvg: timeInt > 0 ? outInt / timeInt : 0,
    batchAvg: loops > 0 ? responses / loops : 0,
    batchHist: Array.from(hist, (h) => (loops > 0 ? h / loops : 0)) as SimResult['batchHist'],
    loopsPerS: loops / window / NP,
    loopUs: loops > 0 ? timeInt / loops : 0,
    messagesPerWrite: writes > 0 ? writeMsgs / writes : 0,
    latencyUs: answered > 0 ? latencySum / answered : 0,
    settingAvg: timeInt > 0 ? settingInt / timeInt : 0,
    settingUnit: ctl[0].settingUnit,
    restartUs: Number.isFinite(collapseTo) ? collapseTo : null,
    afterStallBatch,
    polls,
    wallMs: performance.now() - wall0,
    series,
  };
}

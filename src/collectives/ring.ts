/**
 * Ring building blocks over byte blocks (block b at byte offsets off[b]..off[b+1]):
 * reduce-scatter leaves rank r with block r reduced over all ranks, allgather circulates
 * every rank's block to all. Each step posts the receive before the send, so incoming chunks
 * are reduced (or copied) straight out of the ring into their final place as they arrive.
 */
import type { Algorithm, CollectiveCall, Reduction } from './call.js';
import type { TransportOp } from '../transport/ops.js';

const mod = (a: number, n: number) => ((a % n) + n) % n;

/**
 * Ring reduce-scatter. `input` holds every block; `work` receives the partial sums (it may be
 * `input` itself for in-place use, or the output of an allreduce). Rank r's result ends in
 * work's block r, or in `result` when given. Step s: send block r-s-1, receive block r-s-2 as work = input op incoming.
 */
export function* ringReduceScatter(c: CollectiveCall, input: Uint8Array, work: Uint8Array, off: readonly number[], red: Reduction, result?: Uint8Array): Algorithm {
  const n = c.size;
  const r = c.rank;
  const right = mod(r + 1, n);
  const left = mod(r - 1, n);
  const ops: TransportOp[] = [];
  for (let s = 0; s < n - 1; s++) {
    const sb = mod(r - s - 1, n);
    const rb = mod(r - s - 2, n);
    // The first block out is this rank's own contribution; later ones are partial sums.
    const src = s === 0 ? input : work;
    ops.length = 0;
    // The last block in is this rank's result: it may go straight to a separate output.
    const dst = result && s === n - 2 ? result : work.subarray(off[rb], off[rb + 1]);
    ops.push(c.recvReduce(left, dst, input.subarray(off[rb], off[rb + 1]), red));
    ops.push(c.send(right, src.subarray(off[sb], off[sb + 1])));
    yield ops;
  }
}

/** Ring allgather: rank r's block (already in place in `out`) reaches every rank. */
export function* ringAllgather(c: CollectiveCall, out: Uint8Array, off: readonly number[], startBlock = c.rank): Algorithm {
  const n = c.size;
  const r = c.rank;
  const right = mod(r + 1, n);
  const left = mod(r - 1, n);
  const ops: TransportOp[] = [];
  for (let s = 0; s < n - 1; s++) {
    const sb = mod(startBlock - s, n);
    const rb = mod(startBlock - s - 1, n);
    ops.length = 0;
    ops.push(c.recv(left, out.subarray(off[rb], off[rb + 1])));
    ops.push(c.send(right, out.subarray(off[sb], off[sb + 1])));
    yield ops;
  }
}

/**
 * Work a plan does on its own memory around the segments of a ring, while other segments'
 * bytes are on the wire: `before(k)` runs just before segment k posts its first step (after
 * the steps already running posted theirs), `after(k)` once segment k is done (after the
 * running ones posted their next step). `flush` hands what was posted to the fabric first.
 * The messages are the same with or without hooks, so ranks with and without them still meet.
 */
export interface SegmentHooks {
  before(k: number): void;
  after(k: number): void;
  flush(): void;
}

/**
 * Runs `count` algorithms (segments of one call), at most `inFlight` at a time, each starting
 * one step after the previous one. A step waits for the current step of every running segment,
 * so one segment's transfer fills the gap where another drains its pipeline between steps.
 * Every rank runs the same schedule, so the messages of a step meet their receives in order.
 */
export function* staggered(make: (k: number) => Algorithm, count: number, inFlight = 2, hooks?: SegmentHooks): Algorithm {
  const running: Algorithm[] = [];
  const segment: number[] = [];
  const current: (readonly TransportOp[])[] = [];
  const step: TransportOp[] = [];
  const finished: number[] = [];
  let next = 0;
  for (;;) {
    // One new segment per step: that is the stagger.
    if (running.length < inFlight && next < count) {
      const k = next++;
      if (hooks) {
        hooks.flush();
        hooks.before(k);
      }
      const g = make(k);
      const r = g.next();
      if (!r.done) {
        running.push(g);
        segment.push(k);
        current.push(r.value);
      } else if (hooks) {
        hooks.after(k);
      }
    }
    if (running.length === 0) {
      if (next >= count) return;
      continue;
    }
    step.length = 0;
    for (const ops of current) for (const op of ops) step.push(op);
    yield step;
    for (let i = 0; i < running.length; i++) {
      const r = running[i].next();
      if (r.done) {
        finished.push(segment[i]);
        running.splice(i, 1);
        segment.splice(i, 1);
        current.splice(i--, 1);
      } else {
        current[i] = r.value;
      }
    }
    if (hooks && finished.length > 0) {
      hooks.flush();
      for (const k of finished) hooks.after(k);
    }
    finished.length = 0;
  }
}

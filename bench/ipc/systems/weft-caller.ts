/**
 * What the three weft systems of `weft bench ipc` share: a closed-loop client that keeps qd
 * calls in flight and checks each response carries its call's number, over any of them.
 */
import { payloadByte, type ClientContext, type PointConfig } from '../system.js';

/** The calls a bench client makes, whatever the system. */
export interface Caller {
  readonly inFlight: number;
  call(payload: Uint8Array, n: number): boolean;
  poll(onResponse: (n: number, response: Uint8Array) => void): number;
}

/** Warmup, barrier, then cfg.calls measured calls; returns their elapsed ms. */
export async function runCaller(c: Caller, cfg: PointConfig, ctx?: ClientContext): Promise<number> {
  const req = new Uint8Array(Math.max(4, cfg.bytes));
  for (let i = 4; i < req.length; i++) req[i] = payloadByte(i);
  const dv = new DataView(req.buffer);
  let bad = 0;
  const onResponse = (n: number, r: Uint8Array) => {
    if ((r[0] | (r[1] << 8) | (r[2] << 16) | (r[3] << 24)) !== n) bad++;
  };
  let next = 0;
  const run = (total: number) => {
    let got = 0;
    const end = next + total;
    while (got < total) {
      while (next < end && c.inFlight < cfg.qd) {
        dv.setInt32(0, next, true);
        if (!c.call(req, next)) break;
        next++;
      }
      got += c.poll(onResponse);
    }
  };
  run(cfg.warmup);
  await ctx?.barrier();
  const t0 = performance.now();
  run(cfg.calls);
  const ms = performance.now() - t0;
  if (bad > 0) throw new Error(`${bad} responses did not carry their call's number`);
  return ms;
}

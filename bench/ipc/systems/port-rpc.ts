/**
 * Request/response over a worker_threads message port (parentPort, a Worker, or a
 * MessageChannel port), shared by the postMessage and MessageChannel baselines. One message
 * per call, as a Node user writes it: the request is a Uint8Array of cfg.bytes bytes whose
 * first 4 bytes carry the call's number (postMessage copies it at the call, so one array is
 * reused), the server posts back what it received, the client checks the number and length.
 */
import type { MessagePort, Worker } from 'node:worker_threads';
import { payloadByte, type ClientContext, type PointConfig } from '../system.js';

/** parentPort, a MessagePort and a Worker all have these. */
export type PortLike = Pick<MessagePort, 'postMessage' | 'on' | 'off'> | Worker;

/** Server side: echoes every message of `port` back to it. Returns the detach function. */
export function echo(port: PortLike): () => void {
  const p = port as MessagePort;
  const onMessage = (m: Uint8Array) => p.postMessage(m);
  p.on('message', onMessage);
  return () => p.off('message', onMessage);
}

/** Client side: warmup, barrier, measured calls; returns the measured ms. */
export async function portClient(port: PortLike, cfg: PointConfig, ctx?: ClientContext): Promise<number> {
  const p = port as MessagePort;
  const req = new Uint8Array(cfg.bytes);
  for (let i = 4; i < req.length; i++) req[i] = payloadByte(i);
  const last = req.length - 1;
  let next = 0;
  let expect = 0;
  const send = () => {
    const n = next++;
    req[0] = n;
    req[1] = n >>> 8;
    req[2] = n >>> 16;
    req[3] = n >>> 24;
    p.postMessage(req);
  };
  const phase = (total: number) =>
    new Promise<void>((resolve, reject) => {
      if (total === 0) return resolve();
      let sent = 0;
      let got = 0;
      const onMessage = (m: Uint8Array) => {
        const n = m[0] | (m[1] << 8) | (m[2] << 16) | (m[3] << 24);
        if (n !== expect || m.length !== cfg.bytes || (last >= 4 && m[last] !== req[last])) {
          p.off('message', onMessage);
          reject(new Error(`wrong response: call ${n} (${m.length} B), expected ${expect} (${cfg.bytes} B)`));
          return;
        }
        expect++;
        if (++got === total) {
          p.off('message', onMessage);
          resolve();
        } else if (sent < total) {
          sent++;
          send();
        }
      };
      p.on('message', onMessage);
      for (; sent < Math.min(cfg.qd, total); sent++) send();
    });
  await phase(cfg.warmup);
  await ctx?.barrier();
  const t0 = performance.now();
  await phase(cfg.calls);
  return performance.now() - t0;
}

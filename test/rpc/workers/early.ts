/**
 * Worker scenario (registered in worker.ts) `earlyBatch`, two ranks: rank 1 creates its
 * context, starts `ctx.serve` (so the context is polled from then on) and creates its endpoint
 * toward rank 0, but connects it only when the parent relays rank 0's 'sent' event, and then
 * only after `args.delayMs` more. Rank 0 connects at once and sends `args.early` requests of
 * distinct lengths and bytes, each flushed in its own batch before it says 'sent', so they all
 * reach rank 1 before rank 1's connect(). Every answer must come back correct, then
 * `args.late` more requests each way.
 */
import { createRpcEngine, type Endpoint } from '../../../src/rpc/index.js';
import type { WeftError } from '../../../src/errors.js';
import { exchange, unb64 } from './mesh.js';
import type { WorkerEnv } from './onesided.js';
import { sendEvent, sendResult } from '../../../harness/worker-ipc.js';

/** What a rank answers: its rank, then the payload with every byte complemented. */
export function earlyAnswer(responder: number, payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(payload.length + 1);
  out[0] = responder;
  for (let i = 0; i < payload.length; i++) out[1 + i] = ~payload[i] & 255;
  return out;
}

/** Request `i` from rank `src`: distinct lengths (so a skewed parse position shows) and bytes. */
export function earlyPayload(src: number, i: number): Uint8Array {
  const p = new Uint8Array(5 + ((i * 41) % 173)).map((_, j) => (src * 97 + i * 13 + j * 3) & 255);
  p.set([0xe7, src, i]);
  return p;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

function check(wrong: string[], what: string, resp: Uint8Array, want: Uint8Array): boolean {
  if (resp.length === want.length && resp.every((b, j) => b === want[j])) return true;
  if (wrong.length < 8) wrong.push(`${what}: got ${Buffer.from(resp).toString('hex')}, want ${Buffer.from(want).toString('hex')}`);
  return false;
}

export async function earlyBatchScenario(env: WorkerEnv): Promise<void> {
  const { rank, provider, args, releasedP } = env;
  const nEarly = Number(args.early ?? 6);
  const nLate = Number(args.late ?? 4);
  const delayMs = Number(args.delayMs ?? 400);
  const timeoutMs = Number(args.timeoutMs ?? 5000);
  const peer = 1 - rank;
  const ctx = await createRpcEngine<unknown>({ provider, label: `rank ${rank}` });
  const wrong: string[] = [];
  let ok = 0;
  const ask = (ep: Endpoint<unknown>, i: number, what: string) => {
    const payload = earlyPayload(rank, i);
    // A small allowance: the default (4 KiB) would exhaust the credit rank 1 granted before it connects.
    return ep.request(payload, { timeoutMs, responseAllowance: 256 }).then(
      (resp) => {
        if (check(wrong, what, resp, earlyAnswer(peer, payload))) ok++;
      },
      (e: WeftError) => {
        if (wrong.length < 8) wrong.push(`${what} failed: ${e.code}: ${e.message}`);
      },
    );
  };

  if (rank === 1) {
    // Served (and so polled) before the endpoint even exists, as a long-lived server would be.
    const server = ctx.serve((payload) => earlyAnswer(rank, payload));
    const ep = ctx.createEndpoint({ sendRingSize: 1 << 16, recvRingSize: 1 << 16, peerLabel: 'rank 0' });
    const goP = new Promise<void>((resolve) => {
      const onMsg = (m: { type: string }) => {
        if (m.type !== 'sent') return;
        process.off('message', onMsg);
        resolve();
      };
      process.on('message', onMsg);
    });
    const table = await exchange(rank, { 0: ep.localInfo() });
    await goP;
    // Rank 0's batches are in our ring (and their completions polled) well before this.
    await sleep(delayMs);
    const before = { state: ep.state, requests: ep.stats.requests, batches: ep.stats.batchesReceived };
    ep.connect(unb64(table.get(0)!.addrs[1]));
    // Batches kept before connect() are decoded inside it.
    const atConnect = { requests: ep.stats.requests, batches: ep.stats.batchesReceived };
    const late: Promise<void>[] = [];
    for (let i = 0; i < nLate; i++) late.push(ask(ep, 100 + i, `late request ${i} to rank 0`));
    await Promise.all(late);
    sendResult(rank, { ok, wrong, before, atConnect, state: ep.state });
    await releasedP;
    server.close();
    ctx.close();
    return;
  }

  const ep = ctx.createEndpoint({ sendRingSize: 1 << 16, recvRingSize: 1 << 16, peerLabel: 'rank 1' });
  const table = await exchange(rank, { 1: ep.localInfo() });
  ep.connect(unb64(table.get(1)!.addrs[0]));
  const server = ctx.serve((payload) => earlyAnswer(rank, payload));
  const early: Promise<void>[] = [];
  for (let i = 0; i < nEarly; i++) {
    const sent = ep.stats.batchesSent;
    early.push(ask(ep, i, `early request ${i} to rank 1`));
    // One batch per request: wait until the driver has flushed this one.
    const deadline = performance.now() + 5000;
    while (ep.stats.batchesSent === sent) {
      if (performance.now() > deadline) throw new Error(`rank 0: early request ${i} was not flushed within 5 s`);
      await sleep(2);
    }
  }
  const batchesSentEarly = ep.stats.batchesSent;
  sendEvent(rank, 'sent');
  await Promise.all(early);
  const earlyOk = ok;
  const late: Promise<void>[] = [];
  for (let i = 0; i < nLate; i++) late.push(ask(ep, nEarly + i, `late request ${i} to rank 1`));
  await Promise.all(late);
  sendResult(rank, { ok, earlyOk, wrong, batchesSentEarly, state: ep.state });
  await releasedP;
  server.close();
  ctx.close();
}

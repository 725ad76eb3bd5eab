/**
 * Worker scenario (registered in worker.ts) `storeMesh`: every rank opens the rendezvous
 * store the test names in args.url (the runner's redis-server under a fresh prefix), creates
 * a context, connects to every other rank with connectRpcMesh, serves, and requests every
 * other rank. Rank 0 first checks that out-of-range ranks and sizes reject with EINVAL.
 */
import { connectRpcMesh, createRpcEngine, type Endpoint } from '../../../src/rpc/index.js';
import { openStore } from '../../../src/rendezvous/open.js';
import type { PrefixStore } from '../../../src/rendezvous/prefix-store.js';
import type { WeftError } from '../../../src/errors.js';
import type { WorkerEnv } from './onesided.js';
import { sendResult } from '../../../harness/worker-ipc.js';

/** What rank `responder` answers to `payload`: its rank, then the payload reversed. */
export function meshAnswer(responder: number, payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(payload.length + 1);
  out[0] = responder;
  for (let i = 0; i < payload.length; i++) out[1 + i] = payload[payload.length - 1 - i];
  return out;
}

export async function storeMeshScenario(env: WorkerEnv): Promise<void> {
  const { rank, n, provider, args, releasedP } = env;
  const url = String(args.url);
  const perPeer = Number(args.perPeer ?? 20);
  const store = await openStore(url, { timeoutMs: 10_000 });
  const ctx = await createRpcEngine<unknown>({ provider, label: `rank ${rank}` });

  // Bad ranks and sizes reject before anything is created or published.
  const negative: { rank: number; size: number; outcome: string }[] = [];
  if (rank === 0) {
    for (const [r, s] of [[n, n], [-1, n], [1.5, n], [0, 0]]) {
      const outcome = await connectRpcMesh(store, ctx, r, s, { timeoutMs: 2000 }).then(
        () => 'resolved',
        (e: WeftError) => `${e.code}: ${e.message}`,
      );
      negative.push({ rank: r, size: s, outcome });
    }
  }
  const endpointsAfterNegative = ctx.endpoints.length;

  const t0 = performance.now();
  const eps = await connectRpcMesh(store, ctx, rank, n, { endpoint: { sendRingSize: 1 << 16, recvRingSize: 1 << 16 }, timeoutMs: 20_000 });
  const connectMs = performance.now() - t0;
  const server = ctx.serve((payload) => meshAnswer(rank, payload));

  const wrong: string[] = [];
  let ok = 0;
  const jobs: Promise<void>[] = [];
  for (let p = 0; p < n; p++) {
    const ep = eps[p];
    if (!ep) continue;
    for (let i = 0; i < perPeer; i++) {
      const payload = new Uint8Array(3 + ((i * 37) % 200)).map((_, j) => (rank * 59 + p * 17 + i * 5 + j) & 255);
      payload.set([rank, p, i]);
      jobs.push(
        (ep as Endpoint<unknown>).request(payload, { timeoutMs: 10_000 }).then(
          (resp) => {
            const want = meshAnswer(p, payload);
            if (resp.length === want.length && resp.every((b, j) => b === want[j])) ok++;
            else if (wrong.length < 5) wrong.push(`request ${i} to rank ${p}: got ${Buffer.from(resp).toString('hex')}, want ${Buffer.from(want).toString('hex')}`);
          },
          (e: WeftError) => {
            if (wrong.length < 5) wrong.push(`request ${i} to rank ${p} failed: ${e.code}: ${e.message}`);
          },
        ),
      );
    }
  }
  await Promise.all(jobs);
  sendResult(rank, {
    ok, wrong, negative, endpointsAfterNegative, connectMs,
    eps: eps.map((e) => (e ? { state: e.state, peerLabel: e.peerLabel } : null)),
  });
  // Peers may still be requesting from us until everyone reported.
  await releasedP;
  server.close();
  ctx.close();
  if (rank === 0) await (store as PrefixStore).close({ purge: true });
  else await store.close();
}

/**
 * The fence a job's close() takes when its ranks talk over the fabric: through the store, like
 * MPI_Finalize's PMIx fence, not a barrier over the fabric.
 *
 * Why not a barrier: on ofi a send is complete once staged, not once received. A rank that
 * left the barrier closed its device while its last barrier message could still sit in its
 * command queue, and the peer waiting for it sat out the whole close timeout (2 hosts x 2
 * ranks: 5.3 s in 3 jobs of 10, with libfabric redialling the closed peer all along). The
 * store answers every request, so when the fence passes, every rank has arrived at close,
 * having finished all its collectives: nobody needs another byte from anyone.
 */
import { Deadline, type WaitOptions } from '../util/deadline.js';
import type { CompletionRouter } from '../nic/completion-router.js';
import type { PrefixStore } from '../rendezvous/prefix-store.js';
import type { Device as TransportDevice } from '../transport/device.js';

const EMPTY = new Uint8Array(0);

/** What the fence needs from a rank. */
export interface FenceMember {
  readonly rank: number;
  readonly size: number;
  readonly store: PrefixStore;
  readonly router: CompletionRouter;
  readonly transport: TransportDevice;
}

/**
 * Resolves once every rank reached the fence, or a peer was lost (it died, or its connection
 * broke; nothing more will come from it), or the job failed. Rejects at the deadline or on
 * the signal. Meanwhile the rank keeps progressing its device, so sends still staged here
 * (a large message whose tail waits for the socket) reach peers that are still receiving.
 */
export async function closeFence(m: FenceMember, options: WaitOptions): Promise<void> {
  const deadline = new Deadline(options.timeoutMs, options.signal);
  const what = `rank ${m.rank}: close (the store fence of ${m.size} ranks)`;
  const stop = new AbortController();
  const signal = options.signal ? AbortSignal.any([options.signal, stop.signal]) : stop.signal;
  let passed = false;
  let failed: unknown;
  void (async () => {
    // The last rank to arrive marks the fence passed: one key to wait for, whatever the size.
    const arrived = await m.store.add('_closing', 1, { timeoutMs: deadline.remaining(), signal });
    if (arrived >= m.size) await m.store.set('_closed', EMPTY, { timeoutMs: deadline.remaining(), signal });
    await m.store.wait(['_closed'], { timeoutMs: deadline.remaining(), signal });
  })().then(
    () => {
      passed = true;
      m.router.kick();
    },
    (err: unknown) => {
      failed = err;
      m.router.kick();
    },
  );
  try {
    await m.router.waitAsync(() => passed || failed !== undefined || m.transport.failure !== undefined || m.transport.lostPeers > 0, { deadline, what });
  } finally {
    stop.abort();
  }
  if (failed !== undefined && !passed) throw failed;
}

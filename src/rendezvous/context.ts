/**
 * A rank's place in a job: its rank and world size, the job's store, its NIC device, and one
 * connected queue pair per peer. `init()` builds one from options or the environment.
 */
import { WeftError } from '../errors.js';
import { native } from '../native/binding.js';
import type { WaitOptions } from '../util/deadline.js';
import { createDevice } from '../nic/index.js';
import type { Device, DeviceOptions, QueuePair, QueuePairOptions } from '../nic/types.js';
import { connectFullMesh } from './full-mesh.js';
import { rankFromEnv, type EnvStyle } from './env.js';
import { openStore } from './open.js';
import { PrefixStore } from './prefix-store.js';
import type { Store } from './store.js';

export interface InitOptions extends WaitOptions {
  /** This rank (default: from the environment, see rankFromEnv). */
  rank?: number;
  /** World size (default: from the environment). */
  size?: number;
  /** Store URL (tcp://, redis://, rediss://, file://) or an open Store. */
  store?: string | Store;
  /** Job namespace in the store (default WEFT_PREFIX or the launcher's job id). */
  prefix?: string;
  /** tcp:// store: host the store server in this process (default: rank 0 under torchrun-style env). */
  serve?: boolean;
  /** NIC provider and options (default WEFT_PROVIDER, else shm). */
  device?: DeviceOptions;
  /** Options for every queue pair. */
  qp?: Omit<QueuePairOptions, 'peerLabel'>;
}

/** A connected rank. */
export class Context {
  /** How this rank found its settings. */
  readonly style: EnvStyle;
  private closed = false;
  constructor(
    readonly rank: number,
    readonly size: number,
    readonly store: PrefixStore,
    readonly device: Device,
    /** pairs[p]: the QP toward rank p (undefined at this rank). */
    readonly pairs: (QueuePair | undefined)[],
    style: EnvStyle,
    private readonly serving: boolean,
  ) {
    this.style = style;
  }

  /**
   * Closes the QPs and the device, and leaves the store: the last rank out deletes the job's
   * keys, and a rank hosting the store server waits (briefly) for the others first.
   */
  async close(options: WaitOptions = {}): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    // A peer still connecting maps our segments: tearing them down first would fail it.
    const everyone = this.pairs.map((_, p) => `_connected/${p}`);
    await this.store.wait(everyone, { timeoutMs: options.timeoutMs ?? 5000, signal: options.signal }).catch(() => {});
    for (const qp of this.pairs) qp?.close();
    this.device.close();
    try {
      await this.store.set(`_gone/${this.rank}`, new Uint8Array(0));
      const left = await this.store.add('_left', 1);
      // The server's host leaves last, or the others lose their store mid-goodbye.
      if (this.serving) {
        const others = this.pairs.flatMap((q, p) => (q ? [`_gone/${p}`] : []));
        await this.store.wait(others, { timeoutMs: options.timeoutMs ?? 5000, signal: options.signal }).catch(() => {});
      }
      await this.store.close({ purge: left === this.size });
    } catch {
      await this.store.close().catch(() => {});
    }
  }
}

/**
 * Joins the job: resolves rank, size and store (options, else environment), opens the store,
 * creates the device and connects a full mesh.
 *
 * @example
 * import { init } from 'weft';
 * const ctx = await init();                    // under `weft run -n 4 app.js`
 * console.log(`rank ${ctx.rank} of ${ctx.size}`);
 * await ctx.close();
 */
export async function init(options: InitOptions = {}): Promise<Context> {
  const fromEnv = options.rank === undefined || options.size === undefined || options.store === undefined ? rankFromEnv() : undefined;
  const rank = options.rank ?? fromEnv!.rank;
  const size = options.size ?? fromEnv!.size;
  const style: EnvStyle = fromEnv?.style ?? 'options';
  const prefix = options.prefix ?? process.env.WEFT_PREFIX ?? fromEnv?.prefix ?? 'weft';
  if (!Number.isInteger(size) || size < 1 || !Number.isInteger(rank) || rank < 0 || rank >= size) {
    throw new WeftError('EINVAL', `init: rank ${rank} and world size ${size} do not fit (need 0 <= rank < size)`);
  }
  watchLauncher();
  const serve = options.serve ?? fromEnv?.serve ?? false;
  const wait: WaitOptions = { timeoutMs: options.timeoutMs, signal: options.signal };
  const raw = typeof options.store === 'object' ? options.store : await openStore(options.store ?? fromEnv!.store, { ...wait, serve });
  const store = new PrefixStore(prefix, raw);
  let device: Device | undefined;
  try {
    const job = prefix.replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 48) || 'weft';
    device = await createDevice({ job, label: `rank ${rank}`, ...options.device });
    const pairs = await connectFullMesh(store, device, rank, size, { ...wait, qp: options.qp });
    await store.set(`_connected/${rank}`, new Uint8Array(0));
    return new Context(rank, size, store, device, pairs, style, serve);
  } catch (err) {
    device?.close();
    await store.close().catch(() => {});
    throw err;
  }
}

let watching = false;

/** Under `weft run`, a rank whose launcher died exits instead of living on as an orphan. */
function watchLauncher(): void {
  const pid = Number(process.env.WEFT_LAUNCHER_PID);
  if (watching || !Number.isInteger(pid) || pid <= 0) return;
  watching = true;
  const start = Number(process.env.WEFT_LAUNCHER_START ?? -1);
  setInterval(() => {
    if (!native.processAlive(pid, start >= 0 ? start : undefined)) {
      process.stderr.write(`weft: the launcher (pid ${pid}) is gone; rank ${process.env.WEFT_RANK} exits\n`);
      process.exit(1);
    }
  }, 500).unref();
}

/**
 * A rank's place in a job: its rank and world size, the job's store, its NIC device, and one
 * connected queue pair per peer. `init()` builds one from options or the environment.
 */
import { availableParallelism } from 'node:os';
import { WeftError } from '../errors.js';
import { native } from '../native/binding.js';
import type { WaitOptions } from '../util/deadline.js';
import { createDevice } from '../nic/index.js';
import { localPlacement } from '../util/placement.js';
import type { Device, DeviceOptions, QueuePair, QueuePairOptions } from '../nic/types.js';
import { Device as TransportDevice, type TransportOptions } from '../transport/device.js';
import { connectFullMeshWithExtras } from './full-mesh.js';
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
  /** Ring shape of the transport (every rank must pass the same). */
  transport?: TransportOptions;
}

/** What a Context is built from (see init / initWith). */
export interface ContextParts {
  rank: number;
  size: number;
  store: PrefixStore;
  device: Device;
  pairs: (QueuePair | undefined)[];
  transport: TransportDevice;
  style: EnvStyle;
  serving: boolean;
}

/** A connected rank. */
export class Context {
  readonly rank: number;
  readonly size: number;
  readonly store: PrefixStore;
  /** The NIC device. */
  readonly device: Device;
  /** pairs[p]: the QP toward rank p (undefined at this rank). */
  readonly pairs: (QueuePair | undefined)[];
  /** Gloo-style transport over the QPs (pairs, rings, progress). */
  readonly transport: TransportDevice;
  /** How this rank found its settings. */
  readonly style: EnvStyle;
  private readonly serving: boolean;
  private closed = false;
  private readonly pool: Uint8Array[] = [];
  constructor(parts: ContextParts) {
    this.rank = parts.rank;
    this.size = parts.size;
    this.store = parts.store;
    this.device = parts.device;
    this.pairs = parts.pairs;
    this.transport = parts.transport;
    this.style = parts.style;
    this.serving = parts.serving;
  }

  /** Lends scratch memory to a collective (pooled by power-of-two size). */
  acquire(bytes: number): Uint8Array {
    let best = -1;
    for (let i = 0; i < this.pool.length; i++) {
      if (this.pool[i].byteLength >= bytes && (best < 0 || this.pool[i].byteLength < this.pool[best].byteLength)) best = i;
    }
    if (best >= 0) return this.pool.splice(best, 1)[0];
    return new Uint8Array(2 ** Math.ceil(Math.log2(Math.max(bytes, 64))));
  }

  release(area: Uint8Array): void {
    if (this.pool.length < 16) this.pool.push(area);
  }

  /**
   * Closes the QPs and the device, and leaves the store: the last rank out deletes the job's
   * keys, and a rank hosting the store server waits (briefly) for the others first.
   */
  async close(options: WaitOptions = {}): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.transport.linger();
    this.transport.close();
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
  return initWith((parts) => new Context(parts), options);
}

/** init() building the context with `make` (the package root adds the collectives to it). */
export async function initWith<C extends Context>(make: (parts: ContextParts) => C, options: InitOptions = {}): Promise<C> {
  const fromEnv = options.rank === undefined || options.size === undefined || options.store === undefined ? rankFromEnv() : undefined;
  const rank = options.rank ?? fromEnv!.rank;
  const size = options.size ?? fromEnv!.size;
  const style: EnvStyle = fromEnv?.style ?? 'options';
  const prefix = options.prefix ?? process.env.WEFT_PREFIX ?? fromEnv?.prefix ?? 'weft';
  if (!Number.isInteger(size) || size < 1 || !Number.isInteger(rank) || rank < 0 || rank >= size) {
    throw new WeftError('EINVAL', `init: rank ${rank} and world size ${size} do not fit (need 0 <= rank < size)`);
  }
  watchLauncher();
  bindLocalRank();
  const serve = options.serve ?? fromEnv?.serve ?? false;
  const wait: WaitOptions = { timeoutMs: options.timeoutMs, signal: options.signal };
  const raw = typeof options.store === 'object' ? options.store : await openStore(options.store ?? fromEnv!.store, { ...wait, serve });
  const store = new PrefixStore(prefix, raw);
  let device: Device | undefined;
  try {
    const job = prefix.replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 48) || 'weft';
    device = await createDevice({ job, label: `rank ${rank}`, ...options.device });
    const transport = new TransportDevice(device, rank, size, options.transport);
    const { qps: pairs, extras } = await connectFullMeshWithExtras(store, device, rank, size, { ...wait, qp: options.qp, extra: transport.descriptor() });
    transport.connect(pairs, extras);
    // Returning only once every peer has mapped this rank, as a two-sided handshake would:
    // a rank that then fails at once must not take its segments from a peer still connecting
    // (the peer would fail first and be named as the cause).
    await store.set(`_connected/${rank}`, new Uint8Array(0));
    await store.wait([...Array(size).keys()].map((p) => `_connected/${p}`), wait);
    return make({ rank, size, store, device, pairs, transport, style, serving: serve });
  } catch (err) {
    device?.close();
    await store.close().catch(() => {});
    throw err;
  }
}

/**
 * Under a launcher that says where a rank sits on its host (weft run: WEFT_LOCAL_RANK; torchrun:
 * LOCAL_RANK; Open MPI: OMPI_COMM_WORLD_LOCAL_RANK), pins each rank to its own core when there
 * are enough cores: two ranks the scheduler leaves on one core hand off through a scheduler
 * slice (~150 us here) instead of a cache line. WEFT_BIND=none turns it off.
 */
function bindLocalRank(env: NodeJS.ProcessEnv = process.env): void {
  if (env.WEFT_BIND === 'none') return;
  const { rank: local, size: count } = localPlacement(env);
  if (!Number.isInteger(local) || !Number.isInteger(count) || local < 0 || count < 2 || count > availableParallelism()) return;
  native.bindToCpu(local);
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

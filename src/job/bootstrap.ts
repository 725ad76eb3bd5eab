/**
 * Joining a job: rank, size and store from options or the environment (`weft run`,
 * torchrun, mpirun), the launcher watchdog and core pinning, the process's one NIC device and
 * its completion router, the transport, and a full mesh of queue pairs through the store.
 */
import { WeftError } from '../errors.js';
import { native } from '../native/binding.js';
import { Deadline, type WaitOptions } from '../util/deadline.js';
import { hostname } from 'node:os';
import { localIdentity } from '../host/identity.js';
import { fabricBindAddress } from '../host/address.js';
import { debugLog } from '../util/debug-log.js';
import { exchangeHosts } from '../rendezvous/hosts.js';
import { mayUseFabric, openJobDevice, requestedProvider } from './device-choice.js';
import { CompletionRouter } from '../nic/completion-router.js';
import { hostCores, localPlacement, startCpuList } from '../host/placement.js';
import type { Device, DeviceOptions, QueuePairOptions } from '../nic/types.js';
import { Device as TransportDevice, type TransportOptions } from '../transport/device.js';
import { awaitFailureReaders, connectFullMeshWithExtras, multiGetOrFailure, publishJoinFailure } from '../rendezvous/full-mesh.js';
import { rankFromEnv, type EnvStyle } from '../rendezvous/env.js';
import { openStore } from '../rendezvous/open.js';
import { checkJobPrefix, PrefixStore } from '../rendezvous/prefix-store.js';
import type { Store } from '../rendezvous/store.js';
import { JobMember, type JobParts } from './member.js';

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

/**
 * Joins the job without the collectives: the NIC's QPs and CQ are the caller's alone.
 *
 * @example
 * import { connect } from 'weftjs';
 * const member = await connect();              // under `weft run -n 4 app.js`
 * console.log(`rank ${member.rank} of ${member.size}`);
 * await member.close();
 */
export async function connect(options: InitOptions = {}): Promise<JobMember> {
  return joinJob((parts) => new JobMember(parts), options);
}

/**
 * Joins the job: resolves rank, size and store (options, else environment), opens the store,
 * learns where every rank runs, creates the device (shm, the fabric, or both for a job that
 * spans hosts), its router and the transport, and connects a full mesh; `make` builds
 * the member from the parts (init() makes a ProcessGroup).
 */
export async function joinJob<M extends JobMember>(make: (parts: JobParts) => M, options: InitOptions = {}): Promise<M> {
  const fromEnv = options.rank === undefined || options.size === undefined || options.store === undefined ? rankFromEnv(process.env, { prefixGiven: options.prefix !== undefined }) : undefined;
  const rank = options.rank ?? fromEnv!.rank;
  const size = options.size ?? fromEnv!.size;
  const style: EnvStyle = fromEnv?.style ?? 'options';
  const prefix = options.prefix ?? process.env.WEFT_PREFIX ?? fromEnv?.prefix ?? 'weft';
  checkJobPrefix(`rank ${String(options.rank ?? fromEnv?.rank)}: init`, prefix);
  const serve = options.serve ?? fromEnv?.serve ?? false;
  // One deadline for the whole of init: each step gets what is left of it (each used to get
  // the whole timeout anew, so init could take 4 x timeoutMs).
  const deadline = new Deadline(options.timeoutMs, options.signal);
  const wait = (): WaitOptions => ({ timeoutMs: Math.max(0, deadline.remaining()), signal: options.signal });
  if (!Number.isInteger(size) || size < 1 || !Number.isInteger(rank) || rank < 0 || rank >= size) {
    const err = new WeftError('EINVAL', `rank ${rank}: init: rank ${rank} does not fit world size ${size} (need 0 <= rank < size): start every rank with the same world size (WEFT_WORLD_SIZE, -n)`);
    await tellTheOthers(options.store ?? fromEnv?.store, prefix, err);
    throw err;
  }
  watchLauncher();
  bindLocalRank();
  const raw = typeof options.store === 'object' ? options.store : await openStore(options.store ?? fromEnv!.store, { ...wait(), serve });
  const store = new PrefixStore(prefix, raw);
  let device: Device | undefined;
  try {
    const job = prefix.replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 48) || 'weft';
    const storeUrl = typeof options.store === 'string' ? options.store : typeof options.store === 'object' ? undefined : fromEnv?.store;
    const bind = mayUseFabric(requestedProvider(options.device)) ? (options.device?.node ?? (await fabricBindAddress({ storeUrl })).address) : '';
    const hosts = await exchangeHosts(store, rank, size, { hostId: localIdentity().hostId, hostName: hostname(), address: bind, cores: hostCores(), cpus: startCpuList() }, wait());
    device = await openJobDevice(hosts, rank, { job, label: `rank ${rank}`, ...options.device }, bind);
    debugLog('rank %d of %d: job %s, %s; device %s%s', rank, size, prefix, hosts.spansHosts ? `${hosts.hostIds.length} hosts` : 'one host', device.provider, bind ? `, bind ${bind}` : '');
    const t0 = performance.now();
    await checkSameDebugMode(store, rank);
    const router = new CompletionRouter(device);
    const transport = new TransportDevice(router, rank, size, options.transport);
    const { qps: pairs, extras } = await connectFullMeshWithExtras(store, device, rank, size, { ...wait(), qp: options.qp, extra: transport.descriptor(), hosts });
    transport.connect(pairs, extras);
    debugLog('rank %d: connected to %d peers in %d ms', rank, size - 1, Math.round(performance.now() - t0));
    if (serve && size > 1) {
      // This process hosts the store: it returns only once every rank has had its answer.
      // A first call that blocks the event loop (a *Sync collective) would otherwise starve
      // the server while a slower rank still waits for its `mesh/connected` answer, and every
      // rank would time out.
      const others = [...Array(size).keys()].filter((p) => p !== rank).map((p) => `_ready/${p}`);
      await multiGetOrFailure(store, others, rank, wait(), (err) => new WeftError('ETIMEDOUT', `rank ${rank}: init: the store's host waited for every rank to leave init(): ${err.message}`, { cause: err }));
    } else if (size > 1) {
      await store.set(`_ready/${rank}`, new Uint8Array(0));
    }
    return make({ rank, size, store, device, router, pairs, transport, style, serving: serve, hosts });
  } catch (err) {
    debugLog('rank %d: init failed: %s', rank, (err as Error).message);
    device?.close();
    // The others then fail at once with this reason instead of timing out.
    await publishJoinFailure(store, err);
    // Hosting the store, keep it up until they have read why (the publisher excepted).
    if (serve && size > 2) await awaitFailureReaders(store, size - 2);
    await store.close().catch(() => {});
    throw err;
  }
}

/**
 * WEFT_CHECK=1 adds a round of messages to every collective: a job where only some ranks set
 * it would time out in its first call. The first rank to arrive sets the job's mode.
 */
async function checkSameDebugMode(store: Store, rank: number): Promise<void> {
  const mine = process.env.WEFT_CHECK === '1' ? '1' : '0';
  const stored = new TextDecoder().decode(await store.compareSet('_check', new Uint8Array(0), new TextEncoder().encode(mine)));
  if (stored !== mine) {
    throw new WeftError('EINVAL', `rank ${rank} runs with WEFT_CHECK=${mine}, the job's first rank to arrive with WEFT_CHECK=${stored}: set it alike on every rank (it adds a round of messages to every collective)`);
  }
}

/** A rank that cannot even take part publishes why, so the others fail at once (bounded: 2 s). */
async function tellTheOthers(where: string | Store | undefined, prefix: string, err: WeftError): Promise<void> {
  if (where === undefined) return;
  let raw: Store | undefined;
  try {
    raw = typeof where === 'object' ? where : await openStore(where, { timeoutMs: 2000 });
    await publishJoinFailure(new PrefixStore(prefix, raw), err);
  } catch {
    // No store: the others time out naming this rank as missing.
  } finally {
    if (typeof where !== 'object') await raw?.close().catch(() => {});
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
  if (!Number.isInteger(local) || !Number.isInteger(count) || local < 0 || count < 2 || count > hostCores()) return;
  native.bindToCpu(local);
}

let watching = false;

/**
 * Under `weft run`, a rank whose launcher died exits instead of living on as an orphan: a timer
 * exits cleanly (closing its devices); a native thread ends a rank whose event loop is blocked
 * (a loop of *Sync calls never runs timers) 1.5 s later, after unlinking its shared memory.
 */
function watchLauncher(): void {
  const pid = Number(process.env.WEFT_LAUNCHER_PID);
  if (watching || !Number.isInteger(pid) || pid <= 0) return;
  watching = true;
  const start = Number(process.env.WEFT_LAUNCHER_START ?? -1);
  native.watchLauncher(pid, start >= 0 ? start : -1, 1500);
  setInterval(() => {
    if (!native.processAlive(pid, start >= 0 ? start : undefined)) {
      process.stderr.write(`weft: the launcher (pid ${pid}) is gone; rank ${process.env.WEFT_RANK} exits\n`);
      process.exit(1);
    }
  }, 500).unref();
}

/**
 * The NIC layer: RDMA verbs semantics over shared memory (`shm`) or libfabric (`ofi`).
 *
 * @example
 * import { createDevice, CompletionBatch } from 'weftjs/nic';
 * const dev = await createDevice({ provider: 'shm', label: 'rank 0' });
 * const mr = dev.allocate(1 << 20);
 * const qp = dev.createQueuePair({ peerLabel: 'rank 1' });
 * // exchange qp.address() and mr.descriptor() with the peer, then:
 * qp.connect(peerAddress);
 * const remote = qp.importRegion(peerDescriptor);
 * qp.postWriteImm(mr, 0, remote, 0, 64, 42, 1, true);
 * await dev.cq.wait({ timeoutMs: 5000 });
 */
import { WeftError } from '../errors.js';
import { native } from '../native/binding.js';
import { ShmDevice, type ShmDeviceOptions } from './shm/device.js';
import type { Device, DeviceOptions } from './types.js';
import { sweepDeadSegments } from '../host/segments.js';
import { sweepFabricSegments } from '../host/fabric-segments.js';

export * from './types.js';
export { CompletionRouter, type CompletionSink } from './completion-router.js';
export { sweepDeadSegments, listSegments, parseSegmentName } from '../host/segments.js';
export { listFabricSegments, sweepFabricSegments } from '../host/fabric-segments.js';
export { localIdentity, isPeerAlive, type ProcessIdentity } from '../host/identity.js';

/** libfabric provider names for weft's short names. */
export const OFI_PROVIDERS: Record<string, string> = {
  tcp: 'tcp;ofi_rxm',
  shm: 'shm',
  verbs: 'verbs;ofi_rxm',
  efa: 'efa',
};

/** What `fabricStatus()` reports. */
export interface FabricStatus {
  /** weft's native core was built with libfabric and loaded it. */
  readonly available: boolean;
  /** Why not, when it is not (e.g. built without libfabric-dev). */
  readonly reason?: string;
  /** libfabric's version, e.g. '1.17.0'. */
  readonly version?: string;
  /** Fabric providers with RDM endpoints and RMA (e.g. 'tcp;ofi_rxm', 'shm'); empty if none or not available. */
  readonly providers: readonly string[];
  /** fi_getinfo failed: its message (providers is then empty). */
  readonly error?: string;
}

/**
 * Whether provider 'ofi' (libfabric) can be used here, and over which fabrics: ask before
 * launching a job that needs it, rather than have every rank fail in init.
 *
 * @example
 * const f = fabricStatus();
 * if (!f.available) console.error(`no fabric here: ${f.reason}`);
 */
export function fabricStatus(): FabricStatus {
  const ofi = native.ofi as { available: boolean; reason?: string; version?: string; providers?: () => string[] };
  if (!ofi.available) return { available: false, reason: ofi.reason ?? 'built without libfabric', providers: [] };
  try {
    return { available: true, version: ofi.version, providers: typeof ofi.providers === 'function' ? ofi.providers() : [] };
  } catch (err) {
    return { available: true, version: ofi.version, providers: [], error: `fi_getinfo failed: ${(err as Error).message}` };
  }
}

/** Parses a provider string ('shm', 'ofi', 'ofi:tcp', 'ofi:shm', 'ofi:verbs;ofi_rxm', ...). */
export function parseProvider(spec: string | undefined): { kind: 'shm' } | { kind: 'ofi'; fabric: string } {
  const s = spec ?? process.env.WEFT_PROVIDER ?? 'shm';
  if (s === 'shm') return { kind: 'shm' };
  if (s === 'ofi') return { kind: 'ofi', fabric: process.env.FI_PROVIDER ? (OFI_PROVIDERS[process.env.FI_PROVIDER] ?? process.env.FI_PROVIDER) : OFI_PROVIDERS.tcp };
  if (s.startsWith('ofi:') && s.length > 4) {
    const name = s.slice(4);
    return { kind: 'ofi', fabric: OFI_PROVIDERS[name] ?? name };
  }
  throw new WeftError('EINVAL', `unknown provider ${JSON.stringify(s)}: use 'shm', 'ofi', or 'ofi:<libfabric provider>' such as 'ofi:tcp', 'ofi:shm', 'ofi:verbs'`);
}

/**
 * Creates a device on the chosen provider (option, else WEFT_PROVIDER, else shm).
 * `'shm+ofi'` (or `'shm+ofi:<fabric>'`) gives one device over both: each queue pair uses
 * shared memory toward a peer on this host and the fabric toward one on another host,
 * decided when it connects (what a job spanning hosts opens; also for threads that run
 * their own copyrpc engine in such a job).
 */
export async function createDevice(options: DeviceOptions & ShmDeviceOptions = {}): Promise<Device> {
  const spec = options.provider ?? process.env.WEFT_PROVIDER;
  if (spec !== undefined && spec.startsWith('shm+')) {
    const shm = new ShmDevice(options);
    try {
      const ofi = await createDevice({ ...options, provider: spec.slice(4) });
      const { MixedDevice } = await import('./mixed/device.js');
      return new MixedDevice(shm, ofi);
    } catch (err) {
      shm.close();
      throw err;
    }
  }
  const p = parseProvider(options.provider);
  if (p.kind === 'shm') return new ShmDevice(options);
  if (!native.ofi.available) {
    throw new WeftError('ENOTSUP', `provider ${options.provider ?? 'ofi'} is not available: ${native.ofi.reason ?? 'built without libfabric'}; or use provider 'shm'`);
  }
  // Loaded on demand: shm-only programs never touch libfabric.
  const ofiModule = './ofi/device.js';
  const { createOfiDevice } = (await import(ofiModule)) as { createOfiDevice(o: DeviceOptions & { fabricProvider: string }): Device };
  return createOfiDevice({ ...options, fabricProvider: p.fabric });
}

/**
 * Removes what a dead process left in /dev/shm: its weft segments and its libfabric shm
 * regions. For a parent that saw its child die (a SIGKILLed rank cannot clean up after itself).
 *
 * @example
 * child.on('exit', () => sweepProcessSegments(child.pid!));
 */
export function sweepProcessSegments(pid: number): string[] {
  return [...sweepDeadSegments(pid), ...sweepFabricSegments(pid)];
}

/**
 * The process's one NIC device, chosen from where the job's ranks run:
 *
 * | provider (option, else WEFT_PROVIDER) | one host | ranks on several hosts             |
 * |---------------------------------------|----------|------------------------------------|
 * | unset or 'auto'                       | shm      | shm inside a host, ofi between     |
 * | 'shm'                                 | shm      | error naming a rank on another host|
 * | 'ofi', 'ofi:NAME'                     | ofi      | ofi for every pair                 |
 *
 * The fabric endpoint binds the address host/address.ts picks (the one published in the
 * rank's host record), never loopback for a job that spans hosts.
 */
import { WeftError } from '../errors.js';
import { createDevice } from '../nic/index.js';
import { MixedDevice } from '../nic/mixed/device.js';
import type { ShmDevice } from '../nic/shm/device.js';
import type { Device, DeviceOptions } from '../nic/types.js';
import type { HostMap } from '../rendezvous/hosts.js';

/** 'auto' when nothing was asked for. */
export function requestedProvider(options: DeviceOptions | undefined): string {
  return options?.provider ?? process.env.WEFT_PROVIDER ?? 'auto';
}

/** True when the requested provider may use the fabric (the rank then needs a bind address). */
export function mayUseFabric(spec: string): boolean {
  return spec === 'auto' || spec === 'ofi' || spec.startsWith('ofi:');
}

/**
 * Opens the device for rank `rank` of a job whose hosts are known.
 *
 * @example
 * const device = await openJobDevice(hosts, rank, { job: 'my-job', label: 'rank 0' }, '10.0.0.7');
 */
export async function openJobDevice(hosts: HostMap, rank: number, options: DeviceOptions, bindAddress: string): Promise<Device> {
  const spec = requestedProvider(options);
  if (spec === 'shm' && hosts.spansHosts) {
    const other = hosts.ranks.findIndex((h) => h.hostId !== hosts.ranks[rank].hostId);
    throw new WeftError('EINVAL', `rank ${rank}: provider 'shm' works inside one host, but ${hosts.describe(other)} runs on another host than ${hosts.describe(rank)}: leave WEFT_PROVIDER unset (shm inside a host, the fabric between hosts) or set it to 'ofi'`);
  }
  if (spec === 'auto' && !hosts.spansHosts) return createDevice({ ...options, provider: 'shm' });
  if (spec !== 'auto') return createDevice({ ...options, provider: spec, node: options.node ?? bindAddress });
  const shm = (await createDevice({ ...options, provider: 'shm' })) as ShmDevice;
  try {
    const ofi = await createDevice({ ...options, provider: 'ofi', node: options.node ?? bindAddress });
    return new MixedDevice(shm, ofi);
  } catch (err) {
    shm.close();
    throw new WeftError((err as WeftError).code ?? 'ETRANSPORT', `rank ${rank}: the job spans ${hosts.hostIds.length} hosts, which needs a fabric between them: ${(err as Error).message}`, { cause: err });
  }
}

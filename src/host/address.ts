/**
 * Which local address a rank's fabric endpoint binds, so that ranks on other hosts can reach
 * it. The address is published in the rank's address blob: binding a wildcard and
 * publishing loopback (or binding loopback) would make every cross-host pair time out.
 *
 * In order of precedence:
 * 1. `WEFT_ADDR`: an address of this host (one of its interfaces'; another host's address
 *    would fail in the fabric with "cannot assign requested address");
 * 2. `WEFT_IFACE` (`weft run --iface`), else libfabric's own `FI_TCP_IFACE`: the first IPv4
 *    address of that interface;
 * 3. the local address of the route toward the store's host (the kernel's choice, read off a
 *    connected UDP socket: no packet is sent): the interface the other hosts reach the store
 *    through is the one they can reach this rank through;
 * 4. the store is on this host (loopback) or has no host (a file:// store): the source of the
 *    default route; a host without one binds 127.0.0.1 (then the job fits on one host).
 */
import { createSocket } from 'node:dgram';
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { networkInterfaces } from 'node:os';
import { WeftError } from '../errors.js';

/** The address to bind and why it was chosen (said in errors about unreachable peers). */
export interface BindChoice {
  address: string;
  why: string;
}

/**
 * Addresses routed through the default route on almost any host: nothing is sent to them, the
 * kernel only says which local address it would use. Unicast and in three documentation
 * networks, so a host whose own network is one of them (a VM on 192.0.2.0/24) still finds its
 * route through another: a broadcast address there (192.0.2.255) cannot be connected to, and
 * such a host used to bind 127.0.0.1.
 */
const DEFAULT_ROUTE_PROBES = ['198.51.100.10', '203.0.113.10', '192.0.2.10'];

/** The first IPv4 address of interface `name` (throws naming the interfaces that exist). */
export function interfaceAddress(name: string, source: string): string {
  const all = networkInterfaces();
  const list = all[name];
  const v4 = list?.find((a) => a.family === 'IPv4');
  if (!v4) {
    const names = Object.keys(all).join(', ');
    throw new WeftError('EINVAL', `${source}=${name}: ${list ? 'that interface has no IPv4 address' : 'no such interface'} on this host (interfaces: ${names}); name one the other hosts reach, or set WEFT_ADDR`);
  }
  return v4.address;
}

/** Every address of this host's interfaces (those that are up). */
function hostAddresses(): { address: string; iface: string }[] {
  const out: { address: string; iface: string }[] = [];
  for (const [iface, list] of Object.entries(networkInterfaces())) {
    for (const a of list ?? []) out.push({ address: a.address, iface });
  }
  return out;
}

/** One spelling per address: IPv6 lower-cased and compressed, without its zone (`%eth0`). */
function canonicalAddress(address: string): string {
  const bare = address.replace(/%.*$/, '');
  return isIP(bare) === 6 ? new URL(`http://[${bare}]`).hostname.slice(1, -1) : bare;
}

/** The local address the kernel would use toward `host` (undefined without a route). */
export async function routeSource(host: string): Promise<string | undefined> {
  let ip = host;
  if (!isIP(host)) {
    try {
      ip = (await lookup(host, { family: 4 })).address;
    } catch {
      return undefined;
    }
  }
  return new Promise((resolve) => {
    const s = createSocket(isIP(ip) === 6 ? 'udp6' : 'udp4');
    const done = (v: string | undefined) => {
      s.close();
      resolve(v);
    };
    s.on('error', () => done(undefined));
    s.connect(9, ip, () => {
      const a = s.address().address;
      done(a === '0.0.0.0' || a === '::' ? undefined : a);
    });
  });
}

function isLoopback(host: string): boolean {
  return host === 'localhost' || host.startsWith('127.') || host === '::1' || host === '[::1]';
}

/** The host part of a store URL (undefined for file:// and unparsable URLs). */
export function storeHost(url: string | undefined): string | undefined {
  if (!url) return undefined;
  try {
    const u = new URL(url);
    if (u.protocol === 'file:') return undefined;
    return u.hostname.replace(/^\[|\]$/g, '') || undefined;
  } catch {
    return undefined;
  }
}

/**
 * Picks the address this rank's fabric endpoint binds and publishes (see the file comment).
 *
 * @example
 * const { address } = await fabricBindAddress({ storeUrl: 'redis://10.0.0.5:6379' });
 */
export async function fabricBindAddress(options: { storeUrl?: string; env?: NodeJS.ProcessEnv } = {}): Promise<BindChoice> {
  const env = options.env ?? process.env;
  if (env.WEFT_ADDR) {
    if (!isIP(env.WEFT_ADDR)) throw new WeftError('EINVAL', `WEFT_ADDR=${env.WEFT_ADDR} is not an IP address; give this host's address that the other hosts reach`);
    const own = hostAddresses();
    const wanted = canonicalAddress(env.WEFT_ADDR);
    if (!own.some((a) => canonicalAddress(a.address) === wanted)) {
      throw new WeftError('EINVAL', `WEFT_ADDR=${env.WEFT_ADDR} is not an address of this host (its addresses: ${own.map((a) => `${a.address} (${a.iface})`).join(', ')}); give the one the other hosts reach, or name its interface with --iface / WEFT_IFACE`);
    }
    return { address: env.WEFT_ADDR, why: 'WEFT_ADDR' };
  }
  if (env.WEFT_IFACE) return { address: interfaceAddress(env.WEFT_IFACE, 'WEFT_IFACE'), why: `interface ${env.WEFT_IFACE} (WEFT_IFACE)` };
  if (env.FI_TCP_IFACE) return { address: interfaceAddress(env.FI_TCP_IFACE, 'FI_TCP_IFACE'), why: `interface ${env.FI_TCP_IFACE} (FI_TCP_IFACE)` };
  const host = storeHost(options.storeUrl);
  if (host && !isLoopback(host)) {
    const src = await routeSource(host);
    if (src) return { address: src, why: `the route toward the store's host ${host}` };
  }
  for (const probe of DEFAULT_ROUTE_PROBES) {
    const def = await routeSource(probe);
    if (def) return { address: def, why: 'the default route' };
  }
  return { address: '127.0.0.1', why: 'no route toward the store or a default route (one host only)' };
}

/**
 * Where every rank runs: before the NIC device exists, each rank publishes its host id and
 * host name and reads everyone's (one set and one batched multiGet). The job then knows
 * whether it spans hosts (and so needs the fabric for some pairs), each rank's place on its
 * host (local rank and size), and what to call each host in errors.
 *
 * Record (UTF-8 text, one field per line): 'WHS2', the 32-hex-digit host id (host/identity.ts:
 * same kernel boot and same /dev/shm), the host name, the address this rank's fabric endpoint
 * binds (empty when it has none), the cores the job may use on that host (host/placement.ts:
 * WEFT_CORES, else the rank's affinity before pinning), the CPUs it could run on at start (the
 * kernel's list format, empty with WEFT_CORES or when unknown). 'WHS1' had neither.
 */
import { WeftError } from '../errors.js';
import type { WaitOptions } from '../util/deadline.js';
import { checkWorldSize, multiGetOrFailure } from './full-mesh.js';
import { MAX_CPU_LIST, parseCpuList } from '../host/placement.js';
import type { Store } from './store.js';

const MAGIC = 'WHS2';
/** A host record claiming more cores than this is malformed. */
const MAX_CORES = 1 << 20;
const MAX_RECORD = 1024;

/** One rank's host as it published it. */
export interface RankHost {
  hostId: string;
  hostName: string;
  /** The address its fabric endpoint binds ('' when it uses none). */
  address: string;
  /** The cores the job may use on that host, as this rank sees them (hostCores()). */
  cores: number;
  /** The CPUs this rank could run on at start ("0-3,8"; '' with WEFT_CORES or unknown: startCpuList()). */
  cpus: string;
}

/** Every rank's host and what follows from it. */
export class HostMap {
  /** `localRank[r]`: rank r's index among the ranks of its host, in rank order. */
  readonly localRank: number[];
  /** `localSize[r]`: how many ranks share rank r's host. */
  readonly localSize: number[];
  /** Distinct host ids, in order of their lowest rank. */
  readonly hostIds: string[];
  /** `hostIndex[r]`: index of rank r's host in `hostIds`. */
  readonly hostIndex: number[];
  /**
   * `oversubscribed[h]`: host h runs more ranks than it has cores: the CPUs in the union of its
   * ranks' lists when every one of them published a list (ranks bound to a core each see one
   * apiece), else the fewest cores any of them published (WEFT_CORES). Every rank computes the
   * same from the same records, so plans that depend on it agree without a message.
   */
  readonly oversubscribed: boolean[];

  constructor(readonly ranks: RankHost[]) {
    const seen = new Map<string, number[]>();
    this.hostIds = [];
    this.hostIndex = [];
    this.localRank = [];
    for (let r = 0; r < ranks.length; r++) {
      const id = ranks[r].hostId;
      let list = seen.get(id);
      if (!list) {
        list = [];
        seen.set(id, list);
        this.hostIds.push(id);
      }
      this.localRank.push(list.length);
      this.hostIndex.push(this.hostIds.indexOf(id));
      list.push(r);
    }
    this.localSize = ranks.map((h) => seen.get(h.hostId)!.length);
    this.oversubscribed = this.hostIds.map((id) => {
      const here = seen.get(id)!;
      const lists = here.map((r) => (ranks[r].cpus ? parseCpuList(ranks[r].cpus) : undefined));
      if (lists.every((l) => l !== undefined)) return here.length > new Set(lists.flat()).size;
      // A record made without a core count (an older caller of this class) says nothing.
      return here.length > Math.min(...here.map((r) => (Number.isInteger(ranks[r].cores) && ranks[r].cores >= 1 ? ranks[r].cores : Infinity)));
    });
  }

  /** True when the ranks run on more than one host. */
  get spansHosts(): boolean {
    return this.hostIds.length > 1;
  }

  /** The ranks on the host of rank `r`, in rank order. */
  ranksOnHostOf(r: number): number[] {
    const id = this.ranks[r].hostId;
    const out: number[] = [];
    for (let p = 0; p < this.ranks.length; p++) if (this.ranks[p].hostId === id) out.push(p);
    return out;
  }

  sameHost(a: number, b: number): boolean {
    return this.ranks[a].hostId === this.ranks[b].hostId;
  }

  /** "rank 3 (host node-b)": how errors name a rank of a job that spans hosts. */
  describe(r: number): string {
    const h = this.ranks[r];
    return h ? `rank ${r} (host ${h.hostName}${h.address ? `, ${h.address}` : ''})` : `rank ${r}`;
  }
}

export function encodeRankHost(h: RankHost): Uint8Array {
  // WEFT_CORES past what a record may say counts as that many (no host has a million cores).
  const cores = Math.min(Math.max(1, Math.floor(h.cores) || 1), MAX_CORES);
  return new TextEncoder().encode(`${MAGIC}\n${h.hostId}\n${h.hostName}\n${h.address}\n${cores}\n${h.cpus}`);
}

/** Decodes rank `from`'s record; throws EPROTO on malformed bytes. */
export function decodeRankHost(bytes: Uint8Array, from: number, to: number): RankHost {
  const bad = (why: string) => new WeftError('EPROTO', `rank ${to}: the host record of rank ${from} is malformed (${why}); is another job using the same store prefix?`);
  if (bytes.byteLength > MAX_RECORD) throw bad(`${bytes.byteLength} bytes`);
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    throw bad('not UTF-8');
  }
  const f = text.split('\n');
  if (f.length !== 6 || f[0] !== MAGIC) throw bad(f[0] === 'WHS1' ? 'a weft version without cores in it: run the same weft on every host' : 'bad magic or field count');
  if (!/^[0-9a-f]{32}$/.test(f[1])) throw bad('bad host id');
  if (f[2].length === 0 || /[\x00-\x1f]/.test(f[2])) throw bad('bad host name');
  if (f[3].length > 64 || /[^0-9a-fA-F:.]/.test(f[3])) throw bad('bad address');
  const cores = /^[1-9][0-9]{0,6}$/.test(f[4]) ? Number(f[4]) : NaN;
  if (!(cores <= MAX_CORES)) throw bad('bad core count');
  if (f[5].length > MAX_CPU_LIST || (f[5] !== '' && parseCpuList(f[5]) === undefined)) throw bad('bad CPU list');
  return { hostId: f[1], hostName: f[2], address: f[3], cores, cpus: f[5] };
}

/**
 * Publishes this rank's host and reads every rank's. Fails at once when a rank published a
 * join failure, and names the ranks that never published within the timeout.
 *
 * @example
 * const hosts = await exchangeHosts(store, rank, size, me, { timeoutMs: 30_000 });
 * if (hosts.spansHosts) console.log(`local rank ${hosts.localRank[rank]} of ${hosts.localSize[rank]}`);
 */
export async function exchangeHosts(store: Store, rank: number, size: number, me: RankHost, options: WaitOptions & { key?: string } = {}): Promise<HostMap> {
  const ns = options.key ?? 'mesh';
  await checkWorldSize(store, ns, rank, size);
  await store.set(`${ns}/host/${rank}`, encodeRankHost(me), { once: true });
  const keys = [...Array(size).keys()].map((p) => `${ns}/host/${p}`);
  const records = await multiGetOrFailure(store, keys, rank, options, async (err) => {
    const missing: number[] = [];
    for (let p = 0; p < size; p++) {
      try {
        await store.get(keys[p], { timeoutMs: 0 });
      } catch {
        missing.push(p);
      }
    }
    return new WeftError('ETIMEDOUT', `rank ${rank}: init timed out waiting for ranks ${missing.join(', ') || '(none, retry)'} to say where they run: are they running with the same store and prefix, and world size ${size}?`, { cause: err });
  });
  return new HostMap(records.map((b, p) => decodeRankHost(b, p, rank)));
}

/**
 * The link floor of an allreduce across two emulated hosts, measured in the same run as the
 * systems it is set against: bench/peers/tcp-link.c on host 0 and host 1, one TCP connection,
 * S bytes each way at once for each allreduce size S. Every allreduce between two hosts moves
 * at least that (each host needs S bytes' worth of the other's partial sums). It is an
 * estimate, not a bound: the fastest socket loop we found, measured in its own minute of a
 * VM whose phases move a transfer by 30%.
 *
 * Rows: system 'floor', provider LINK_FLOOR, op 'allreduce', np the job's ranks (the rows it
 * is set against), sizes from FLOOR_MIN_BYTES (below it, latency and not the link's bandwidth
 * decides).
 *
 * The host floor adds what a host must do besides: with one core per emulated host, that core
 * also sums its ranks' arrays (one pass of the sum kernel) and writes the result into the
 * second rank's output (one memcpy); floor.ts measures both in the same run. The three are
 * medians taken at different moments and added, as if nothing overlapped.
 */
import type { EmulatedHosts } from '../../harness/emulated-hosts.js';
import { buildPeer } from '../peers/index.js';
import { describe, finished } from '../peers/spawn.js';
import { floorSizes, measureFloor } from './floor.js';
import { LINK_FLOOR, withBandwidth, type CollectiveResult, type CollectiveRow } from './metrics.js';
/** A port on host 0's address that nothing else in the bench listens on. */
const PORT = 29611;

export interface LinkFloorOptions {
  /** Requested allreduce sizes (as the sweep's); floorSizes picks those measured. */
  sizes: number[];
  /** Ranks of the job whose allreduce rows the floor is set against. */
  np: number;
  /** Timed iterations per size (after 2 warm-up ones). */
  iters: number;
  timeoutMs: number;
}

/** The client's rows, checked: one per measured size, in order, every number finite. */
export function parseLinkRows(stdout: string, bytes: number[], np: number): CollectiveResult[] {
  const rows = stdout
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as CollectiveRow);
  const bad = rows.find((r) => r.system !== 'floor' || r.provider !== LINK_FLOOR || ![r.bytes, r.median_us, r.min_us, r.p90_us].every(Number.isFinite));
  if (bad) throw new Error(`tcp-link: malformed row ${JSON.stringify(bad)}`);
  if (rows.map((r) => r.bytes).join(',') !== bytes.join(',')) throw new Error(`tcp-link: expected rows for ${bytes.join(',')} bytes, got ${rows.map((r) => r.bytes).join(',') || 'none'}`);
  return rows.map((r) => withBandwidth({ ...r, np }));
}

/** Measures the link floor between host 0 and host 1 of `h`; [] when no size reaches FLOOR_MIN_BYTES. */
export async function measureLinkFloor(h: EmulatedHosts, o: LinkFloorOptions): Promise<CollectiveResult[]> {
  const bytes = floorSizes(o.sizes);
  if (bytes.length === 0 || h.hosts.length < 2) return [];
  const { binary } = await buildPeer('tcp-link');
  const common = ['--addr', h.hosts[0].address, '--port', String(PORT), '--sizes', bytes.join(','), '--iters', String(o.iters), '--timeout-ms', String(o.timeoutMs)];
  // The harness stops itself at --timeout-ms; the kill is for a harness that hangs anyway.
  const server = finished(h.spawn(0, binary, ['--role', 'server', ...common]), 'tcp-link server (host 0)', o.timeoutMs + 5_000);
  const client = finished(h.spawn(1, binary, ['--role', 'client', ...common]), 'tcp-link client (host 1)', o.timeoutMs + 5_000);
  const results = await Promise.all([server, client]);
  if (results.some((r) => r.code !== 0)) throw new Error(`tcp-link between hosts 0 and 1 failed:\n${describe(results)}`);
  return parseLinkRows(results[1].stdout, bytes, o.np);
}

/** The memory floor (floor.ts: sum kernel and memcpy on one core) with the job's np, so its rows sit beside the job's. */
export function measureMemoryFloor(sizes: number[], np: number): CollectiveResult[] {
  return measureFloor(sizes).map((r) => ({ ...r, np }));
}

/** The parts of the host floor at one size, and their sum; undefined unless all three were measured. */
export interface HostFloor {
  link: number;
  sum: number;
  copy: number;
  total: number;
}

/** The host floor (us) at `bytes` from a run's rows: link + one sum-kernel pass + one memcpy. */
export function hostFloor(rows: readonly CollectiveResult[], bytes: number): HostFloor | undefined {
  const us = (provider: string) => rows.find((r) => r.system === 'floor' && r.op === 'allreduce' && r.provider === provider && r.bytes === bytes)?.median_us;
  const link = us(LINK_FLOOR);
  const sum = us('sum-kernel');
  const copy = us('memcpy');
  if (link === undefined || sum === undefined || copy === undefined) return undefined;
  return { link, sum, copy, total: link + sum + copy };
}

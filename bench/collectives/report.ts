/**
 * The text report of `weft bench collectives`: one table per (op, np, weft provider) with
 * weft's two variants next to the peers that use the same kind of transport, the ratios per
 * size, the memory floor of allreduce at np=2, and the issue's targets checked against the run.
 *
 * A ratio is peer time / weft time at the same bytes, which equals weft busbw / peer busbw:
 * above 1, weft is faster.
 */
import { table } from '../lib/stats.js';
import { rowKey } from './aggregate.js';
import { COLLECTIVE_OPS, type CollectiveOp, type CollectiveResult } from './metrics.js';

/** A peer as the tables name it, and the rows it has. */
interface PeerRef {
  label: string;
  system: string;
  provider: string;
}

const GLOO: PeerRef = { label: 'gloo', system: 'gloo', provider: 'tcp' };
const MPI_SM: PeerRef = { label: 'mpi-sm', system: 'openmpi', provider: 'sm' };
const MPI_TCP: PeerRef = { label: 'mpi-tcp', system: 'openmpi', provider: 'tcp' };

/** Who weft over `provider` is compared with: shared memory vs sm and Gloo, a fabric vs MPI tcp. */
export function peersOf(provider: string): PeerRef[] {
  return provider === 'shm' ? [GLOO, MPI_SM] : [MPI_TCP];
}

export function formatUs(us: number | undefined): string {
  if (us === undefined || !Number.isFinite(us)) return '-';
  if (us >= 1e4) return `${(us / 1e3).toFixed(1)} ms`;
  if (us >= 1e3) return `${(us / 1e3).toFixed(2)} ms`;
  return `${us.toFixed(us >= 100 ? 0 : us >= 10 ? 1 : 2)} us`;
}

export function formatSize(bytes: number): string {
  for (const [unit, scale] of [['GiB', 1 << 30], ['MiB', 1 << 20], ['KiB', 1 << 10]] as const) {
    if (bytes >= scale && bytes % scale === 0) return `${bytes / scale} ${unit}`;
  }
  return `${bytes} B`;
}

function formatGbps(x: number | null | undefined): string {
  return x === null || x === undefined ? '-' : x.toFixed(x >= 10 ? 1 : x >= 1 ? 2 : 3);
}

function formatRatio(x: number | undefined): string {
  return x === undefined || !Number.isFinite(x) ? '-' : x.toFixed(x >= 10 ? 1 : 2);
}

/** Rows by (system, op, np, provider, bytes). */
export class RowIndex {
  private readonly map = new Map<string, CollectiveResult>();
  constructor(readonly rows: CollectiveResult[]) {
    for (const r of rows) this.map.set(rowKey(r), r);
  }
  get(system: string, op: CollectiveOp, np: number, provider: string, bytes: number): CollectiveResult | undefined {
    return this.map.get(rowKey({ system, op, np, provider, bytes }));
  }
  /** peer time / weft time (> 1: weft faster), when both ran. */
  ratio(weftSystem: string, weftProvider: string, peer: PeerRef, op: CollectiveOp, np: number, bytes: number): number | undefined {
    const w = this.get(weftSystem, op, np, weftProvider, bytes);
    const p = this.get(peer.system, op, np, peer.provider, bytes);
    return w && p ? p.median_us / w.median_us : undefined;
  }
}

function distinct<T>(xs: T[]): T[] {
  return [...new Set(xs)];
}

/** One table: sizes down, weft's variants, busbw, the peers' times and the ratios across. */
function opTable(ix: RowIndex, op: CollectiveOp, np: number, provider: string): string {
  const peers = peersOf(provider).filter((p) => ix.rows.some((r) => r.system === p.system && r.provider === p.provider && r.np === np && r.op === op));
  const sizes = distinct(ix.rows.filter((r) => r.system.startsWith('weft') && r.op === op && r.np === np && r.provider === provider).map((r) => r.bytes)).sort((a, b) => a - b);
  const header = ['size', 'weft', 'weft-sync', 'busbw GB/s (weft / sync)', ...peers.map((p) => p.label), ...peers.map((p) => `${p.label} x (weft / sync)`)];
  const rows = sizes.map((bytes) => {
    const w = ix.get('weft', op, np, provider, bytes);
    const s = ix.get('weft-sync', op, np, provider, bytes);
    return [
      op === 'barrier' ? '-' : formatSize(bytes),
      formatUs(w?.median_us),
      formatUs(s?.median_us),
      op === 'barrier' ? '-' : `${formatGbps(w?.busbw_gbps)} / ${formatGbps(s?.busbw_gbps)}`,
      ...peers.map((p) => formatUs(ix.get(p.system, op, np, p.provider, bytes)?.median_us)),
      ...peers.map((p) => `${formatRatio(ix.ratio('weft', provider, p, op, np, bytes))} / ${formatRatio(ix.ratio('weft-sync', provider, p, op, np, bytes))}`),
    ];
  });
  return `${op}, np=${np}, weft over ${provider} (median of the max over ranks)\n${table(header, rows)}`;
}

/** The memory floor lines under the np=2 allreduce table. */
function floorLines(ix: RowIndex, provider: string): string[] {
  const floors = ix.rows.filter((r) => r.system === 'floor' && r.provider === 'sum-kernel');
  return floors.map((f) => {
    const copy = ix.get('floor', 'allreduce', 2, 'memcpy', f.bytes);
    const w = ix.get('weft', 'allreduce', 2, provider, f.bytes);
    const s = ix.get('weft-sync', 'allreduce', 2, provider, f.bytes);
    const x = (r: CollectiveResult | undefined) => (r ? `${(r.median_us / f.median_us).toFixed(2)}x` : '-');
    return `  ${formatSize(f.bytes)}: floor ${formatUs(f.median_us)} (sum kernel, ${formatGbps(((3 * f.bytes) / f.median_us) / 1e3)} GB/s read+written; memcpy ${formatUs(copy?.median_us)}); weft ${x(w)}, weft-sync ${x(s)} the floor`;
  });
}

/** Every table of the run, in op order. */
export function collectivesTables(rows: CollectiveResult[]): string {
  const ix = new RowIndex(rows);
  const weft = rows.filter((r) => r.system === 'weft' || r.system === 'weft-sync');
  const out: string[] = [];
  for (const op of COLLECTIVE_OPS) {
    for (const np of distinct(weft.filter((r) => r.op === op).map((r) => r.np)).sort((a, b) => a - b)) {
      for (const provider of distinct(weft.filter((r) => r.op === op && r.np === np).map((r) => r.provider))) {
        out.push(opTable(ix, op, np, provider));
        if (op === 'allreduce' && np === 2 && provider === 'shm') {
          const lines = floorLines(ix, provider);
          if (lines.length) out.push(`memory floor of allreduce at np=2 (one core reads input and peer data, sums, writes the output):\n${lines.join('\n')}`);
        }
      }
    }
  }
  return out.join('\n\n');
}

/** One target's verdict, for the weft and weft-sync variants. */
export interface TargetResult {
  target: string;
  /** Per variant: the measured value (worst case over the sizes it covers) and whether it is met. */
  verdicts: { system: string; measured: string; met: boolean | undefined }[];
}

/** Lowest ratio over sizes (>= minBytes) and nps, or undefined when no pair ran. */
function worstRatio(ix: RowIndex, system: string, provider: string, peer: PeerRef, nps: number[], minBytes: number): { ratio: number; where: string } | undefined {
  let worst: { ratio: number; where: string } | undefined;
  for (const r of ix.rows) {
    if (r.system !== system || r.op !== 'allreduce' || r.provider !== provider || r.bytes < minBytes || !nps.includes(r.np)) continue;
    const x = ix.ratio(system, provider, peer, 'allreduce', r.np, r.bytes);
    if (x !== undefined && (!worst || x < worst.ratio)) worst = { ratio: x, where: `${formatSize(r.bytes)} np=${r.np}` };
  }
  return worst;
}

/** The issue's targets, checked on the aggregated rows (np 2 and 4; medians). */
export function checkTargets(rows: CollectiveResult[]): TargetResult[] {
  const ix = new RowIndex(rows);
  const variants = ['weft', 'weft-sync'];
  const ofi = distinct(rows.filter((r) => r.system === 'weft' && r.provider.startsWith('ofi')).map((r) => r.provider));
  const ratioTarget = (target: string, provider: string, peer: PeerRef, minBytes: number, factor: number): TargetResult => ({
    target,
    verdicts: variants.map((system) => {
      const w = worstRatio(ix, system, provider, peer, [2, 4], minBytes);
      return { system, measured: w ? `worst ${w.ratio.toFixed(2)}x (${w.where})` : 'not measured', met: w ? w.ratio >= factor : undefined };
    }),
  });
  const out: TargetResult[] = [
    ratioTarget('allreduce busbw >= 1.0x Open MPI sm at every size >= 1 MiB (shm, np=2,4)', 'shm', MPI_SM, 1 << 20, 1),
    ratioTarget('allreduce busbw >= 3x Gloo at every size (shm, np=2,4)', 'shm', GLOO, 0, 3),
  ];
  const eight = (system: string) => ix.get(system, 'allreduce', 2, 'shm', 8);
  const limit = (system: string, us: number) => {
    const r = eight(system);
    return { system, measured: r ? formatUs(r.median_us) : 'not measured', met: r ? r.median_us <= us : undefined };
  };
  out.push({ target: '8 B allreduce at np=2 (shm): <= 2 us blocking (weft-sync), <= 10 us with await (weft)', verdicts: [limit('weft', 10), limit('weft-sync', 2)] });
  const floor = ix.get('floor', 'allreduce', 2, 'sum-kernel', 64 << 20);
  out.push({
    target: '64 MiB allreduce at np=2 (shm) within 1.5x of the memory floor (sum kernel, same run)',
    verdicts: variants.map((system) => {
      const w = ix.get(system, 'allreduce', 2, 'shm', 64 << 20);
      if (!w || !floor) return { system, measured: 'not measured', met: undefined };
      const x = w.median_us / floor.median_us;
      return { system, measured: `${formatUs(w.median_us)} = ${x.toFixed(2)}x floor ${formatUs(floor.median_us)}`, met: x <= 1.5 };
    }),
  });
  for (const p of ofi) out.push(ratioTarget(`allreduce busbw >= 1.0x Open MPI tcp at every size >= 1 MiB (${p}, np=2,4)`, p, MPI_TCP, 1 << 20, 1));
  return out;
}

export function targetsText(results: TargetResult[]): string {
  const verdict = (m: boolean | undefined) => (m === undefined ? '?' : m ? 'met' : 'NOT met');
  return `targets (medians of this run):\n${results.map((t) => `  ${t.target}\n${t.verdicts.map((v) => `    ${v.system.padEnd(9)} ${v.measured}: ${verdict(v.met)}`).join('\n')}`).join('\n')}`;
}

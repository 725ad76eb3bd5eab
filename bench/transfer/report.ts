/** Medians over trials, the table, and the targets, for `weft bench transfer`. */
import { formatBytes, formatNumber, median, table } from '../lib/stats.js';
import type { TrialPoint } from './plan.js';

/** One trial's point, as collected. */
export interface TransferRow extends TrialPoint {
  bench: 'transfer';
  system: 'weft' | 'nic';
  provider: string;
  op: 'read' | 'write';
  batch: number;
  inflight: number;
  wait: string;
  run: number;
}

/** The median over trials of one (system, provider, op, block), as printed with --json. */
export interface TransferSummary {
  bench: 'transfer';
  system: 'weft' | 'nic';
  provider: string;
  op: 'read' | 'write';
  block_bytes: number;
  batch: number;
  inflight: number;
  wait: string;
  gbps: number;
  ops_per_s: number;
  avg_us: number;
  p99_us: number;
  /**
   * weft rows: the median over runs of gbps / the NIC's gbps at the same point IN THE SAME RUN
   * (its trials are adjacent in time, their order rotated per run). This machine's memory
   * bandwidth drifts by tens of percent between runs; pairing cancels that drift.
   */
  vs_nic?: number;
  /** weft rows: the median gbps over the NIC's median gbps (unpaired; the drift stays in). */
  vs_nic_of_medians?: number;
  runs: number[];
}

/** One point of one system; `run` set: that trial's. */
const pointKey = (r: { system: string; wait: string; provider: string; op: string; block_bytes: number }, run = -1) => `${r.system}|${r.wait}|${r.provider}|${r.op}|${r.block_bytes}|${run}`;

export function summarize(rows: TransferRow[]): TransferSummary[] {
  const groups = new Map<string, TransferRow[]>();
  for (const r of rows) {
    const k = pointKey(r);
    let g = groups.get(k);
    if (!g) groups.set(k, (g = []));
    g.push(r);
  }
  const out: TransferSummary[] = [];
  for (const g of groups.values()) {
    const r = g[0];
    out.push({
      bench: 'transfer',
      system: r.system,
      provider: r.provider,
      op: r.op,
      block_bytes: r.block_bytes,
      batch: r.batch,
      inflight: r.inflight,
      wait: r.wait,
      gbps: median(g.map((x) => x.gbps)),
      ops_per_s: median(g.map((x) => x.ops_per_s)),
      avg_us: median(g.map((x) => x.avg_us)),
      p99_us: median(g.map((x) => x.p99_us)),
      runs: g.map((x) => x.gbps),
    });
  }
  const nicRun = new Map<string, number>();
  for (const r of rows) if (r.system === 'nic') nicRun.set(pointKey(r, r.run), r.gbps);
  for (const s of out) {
    if (s.system !== 'weft') continue;
    const nic = out.find((n) => n.system === 'nic' && n.provider === s.provider && n.op === s.op && n.block_bytes === s.block_bytes);
    if (!nic) continue;
    s.vs_nic_of_medians = s.gbps / nic.gbps;
    const paired = groups.get(pointKey(s))!.flatMap((w) => {
      const n = nicRun.get(pointKey(nic, w.run));
      return n ? [w.gbps / n] : [];
    });
    s.vs_nic = paired.length ? median(paired) : s.vs_nic_of_medians;
  }
  return out;
}

export function transferReport(summary: TransferSummary[], o: { batch: number; inflight: number; runs: number; seconds: number }): string {
  const rows: string[][] = [];
  const weft = summary.filter((s) => s.system === 'weft');
  for (const w of weft) {
    const n = summary.find((x) => x.system === 'nic' && x.provider === w.provider && x.op === w.op && x.block_bytes === w.block_bytes);
    rows.push([
      w.provider,
      w.op,
      w.wait,
      formatBytes(w.block_bytes),
      n ? n.gbps.toFixed(2) : '-',
      w.gbps.toFixed(2),
      w.vs_nic === undefined ? '-' : `${w.vs_nic.toFixed(2)}x`,
      w.vs_nic_of_medians === undefined ? '-' : `${w.vs_nic_of_medians.toFixed(2)}x`,
      `${formatNumber(w.ops_per_s)}/s`,
      n ? `${formatNumber(n.ops_per_s)}/s` : '-',
      `${w.avg_us.toFixed(0)} / ${w.p99_us.toFixed(0)}`,
      n ? `${n.avg_us.toFixed(0)} / ${n.p99_us.toFixed(0)}` : '-',
    ]);
  }
  const out = [
    `batch ${o.batch} x ${o.inflight} in flight, ${o.seconds} s per point, median of ${o.runs} run(s); weft/nic is the median of each run's ratio (trials of one run are adjacent in time), 'of medians' the ratio of the medians; weft waits async (await waitBatch) or sync (waitBatchSync, busy-polling as the NIC stream does); latency is per batch (submit to last completion)`,
    table(['provider', 'op', 'wait', 'block', 'nic GB/s', 'weft GB/s', 'weft/nic', 'of medians', 'weft transfers', 'nic ops', 'weft avg/p99 us', 'nic avg/p99 us'], rows),
  ];
  const targets: string[] = [];
  for (const p of [...new Set(weft.map((w) => w.provider))]) {
    for (const wait of [...new Set(weft.map((w) => w.wait))]) {
      const big = weft.filter((w) => w.provider === p && w.wait === wait && w.block_bytes >= 64 << 10 && w.vs_nic !== undefined);
      if (!big.length) continue;
      const worst = big.reduce((a, b) => ((a.vs_nic as number) <= (b.vs_nic as number) ? a : b));
      targets.push(`${p} (${wait}): READ and WRITE >= 0.9x the NIC layer at every block >= 64 KiB: lowest ${(worst.vs_nic as number).toFixed(2)}x, median of paired runs (${worst.op} ${formatBytes(worst.block_bytes)}; ratio of medians there ${(worst.vs_nic_of_medians as number).toFixed(2)}x) ${(worst.vs_nic as number) >= 0.9 ? 'met' : 'NOT met'}`);
    }
  }
  const small = weft.filter((w) => w.provider === 'shm' && w.block_bytes === 4096);
  if (small.length && o.batch === 64) {
    for (const wait of [...new Set(small.map((w) => w.wait))]) {
      const worst = small.filter((w) => w.wait === wait).reduce((a, b) => (a.ops_per_s <= b.ops_per_s ? a : b));
      targets.push(`shm (${wait}): >= 1 M transfers/s at 4 KiB, batch 64: ${formatNumber(worst.ops_per_s)}/s (${worst.op}) ${worst.ops_per_s >= 1e6 ? 'met' : 'NOT met'}`);
    }
  }
  if (targets.length) out.push('\ntargets:\n  ' + targets.join('\n  '));
  return out.join('\n');
}

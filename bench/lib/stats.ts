/** Small statistics and output helpers shared by the benchmarks. */
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { packageRoot } from '../../src/native/binding.js';

export function median(xs: number[]): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/** One measured number, as printed in JSON lines. */
export interface BenchRecord {
  bench: string;
  provider: string;
  bytes: number;
  metric: string;
  median: number;
  unit: string;
  runs: number[];
  [extra: string]: unknown;
}

/**
 * Where results go: WEFT_BENCH_OUT when set; in a checkout of weft, bench/results/; in an
 * installed package, weft-bench-results/ in the current directory (never into node_modules).
 */
export function resultsDir(): string {
  if (process.env.WEFT_BENCH_OUT) return path.resolve(process.env.WEFT_BENCH_OUT);
  if (packageRoot.split(path.sep).includes('node_modules')) return path.resolve('weft-bench-results');
  return path.join(packageRoot, 'bench', 'results');
}

/** Writes records to <resultsDir()>/<name>-<timestamp>.json and returns the path. */
export function saveResults(name: string, records: BenchRecord[], meta: Record<string, unknown>): string {
  const dir = resultsDir();
  mkdirSync(dir, { recursive: true });
  const file = path.join(dir, `${name}-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, JSON.stringify({ meta, records }, null, 2));
  return file;
}

export function formatNumber(x: number): string {
  if (!Number.isFinite(x)) return String(x);
  if (Math.abs(x) >= 1e6) return `${(x / 1e6).toFixed(2)} M`;
  if (Math.abs(x) >= 1e3) return `${(x / 1e3).toFixed(1)} k`;
  if (Math.abs(x) >= 10) return x.toFixed(1);
  return x.toFixed(3);
}

export function formatBytes(b: number): string {
  if (b >= 1 << 20) return `${b / (1 << 20)} MiB`;
  if (b >= 1 << 10) return `${b / (1 << 10)} KiB`;
  return `${b} B`;
}

/** A plain fixed-width table. */
export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (r: string[]) => r.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ');
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

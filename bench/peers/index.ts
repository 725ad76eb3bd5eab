/**
 * The peers of `weft bench collectives`: Gloo and Open MPI running the same sweep, from our
 * own C/C++ harnesses (gloo-bench.cc, mpi-bench.c next to this file's source), compiled on
 * demand into build/peers/ and rebuilt when the source is newer than the binary.
 *
 *   detect()                 which peers this machine has, with the reason when one is missing
 *   buildPeer('gloo'|'mpi'|'tcp-link')  compiles a harness if needed, returns the binary
 *                            (tcp-link.c: the bare link between emulated hosts, a floor, not a peer)
 *   runGloo({np, ...})       np gloo-bench processes, tcp transport on 127.0.0.1, FileStore rendezvous
 *   runMpi({np, btl, ...})   mpirun mpi-bench, pml ob1 with BTLs self,vader ('sm') or self,tcp over lo ('tcp')
 *
 * CLI, for quick manual runs:
 *   node dist/bench/peers/index.js --np 2 --ops allreduce --sizes 8,1048576,67108864 [--json]
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, renameSync, rmSync, statSync, unlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { homedir } from 'node:os';
import { fileURLToPath } from 'node:url';
import { Command } from 'commander';
import { packageRoot } from '../../src/native/binding.js';
import { COLLECTIVE_OPS, caseBytes, isCollectiveOp, parseSize, parseSizes, withBandwidth, type CollectiveOp, type CollectiveResult, type CollectiveRow } from '../collectives/metrics.js';
import { table } from '../lib/stats.js';
import { applyQuick, runIfMain } from '../lib/command.js';
import { describe, onAbandon, PeerRunError, runAll, type LaunchResult } from './spawn.js';

export { PeerRunError } from './spawn.js';

export type PeerName = 'gloo' | 'mpi';

export interface PeerStatus {
  available: boolean;
  /** Why not, and what to install, when not available. */
  reason?: string;
  /** "0.5.0" (Gloo, from gloo/config.h) or "4.1.4" (Open MPI). */
  version?: string;
}

export interface PeerAvailability {
  gloo: PeerStatus;
  mpi: PeerStatus;
}

/** A row from a peer harness. */
export interface PeerRow extends CollectiveRow {
  system: 'gloo' | 'openmpi';
}

export interface PeerRunOptions {
  np: number;
  ops: CollectiveOp[];
  /** Requested sizes in bytes (nccl-tests sizes; see caseBytes for what each op reports). */
  sizes: number[];
  /** Timed iterations per size. */
  iters: number;
  /** Untimed iterations per size, after one checked run. */
  warmup: number;
  /** For the whole run; then every process is killed and the promise rejects. */
  timeoutMs: number;
  /** Caps timed runs at max(3, byteBudget / bytes), warmup at max(1, ...); 0 or absent: no cap. */
  byteBudget?: number;
  /** Where binaries live; default <package root>/build/peers. */
  binDir?: string;
}

export type MpiBtl = 'sm' | 'tcp';

export interface MpiRunOptions extends PeerRunOptions {
  /** 'sm': --mca btl self,vader (Open MPI 4's shared memory); 'tcp': --mca btl self,tcp over lo. */
  btl: MpiBtl;
}

const SOURCE_DIR = path.join(packageRoot, 'bench', 'peers');
/**
 * Where the peers' harnesses are compiled: build/peers in a checkout; from an installed
 * package the user's cache (XDG_CACHE_HOME or ~/.cache), never inside node_modules.
 */
export const DEFAULT_BIN_DIR = packageRoot.split(path.sep).includes('node_modules')
  ? path.join(process.env.XDG_CACHE_HOME ?? path.join(homedir(), '.cache'), 'weftjs', 'peers')
  : path.join(packageRoot, 'build', 'peers');

/** The harnesses buildPeer compiles: the peers, and the bare TCP link between emulated hosts (tcp-link.c). */
export type HarnessName = PeerName | 'tcp-link';

const SOURCES: Record<HarnessName, string> = { gloo: 'gloo-bench.cc', mpi: 'mpi-bench.c', 'tcp-link': 'tcp-link.c' };
const BINARIES: Record<HarnessName, string> = { gloo: 'gloo-bench', mpi: 'mpi-bench', 'tcp-link': 'tcp-link' };

function cxx(): string {
  return process.env.CXX || 'g++';
}

function cc(): string {
  return process.env.CC || 'gcc';
}

/** WEFT_GLOO_PREFIX: a Gloo installed outside the compiler's default paths (e.g. /opt/gloo). */
function glooFlags(): { cflags: string[]; libs: string[] } {
  const prefix = process.env.WEFT_GLOO_PREFIX;
  if (!prefix) return { cflags: [], libs: ['-lgloo'] };
  const lib = path.join(prefix, 'lib');
  return { cflags: [`-I${path.join(prefix, 'include')}`], libs: [`-L${lib}`, `-Wl,-rpath,${lib}`, '-lgloo'] };
}

function run(cmd: string, args: string[], input?: string): { ok: boolean; out: string; err: string } {
  const r = spawnSync(cmd, args, { encoding: 'utf8', input, timeout: 20_000 });
  return { ok: !r.error && r.status === 0, out: r.stdout ?? '', err: r.error ? r.error.message : (r.stderr ?? '') };
}

function detectGloo(): PeerStatus {
  const cc = cxx();
  if (!run(cc, ['--version']).ok) return { available: false, reason: `no C++ compiler (${cc}); apt-get install g++` };
  const { cflags, libs } = glooFlags();
  const probe = run(cc, [...cflags, '-E', '-P', '-x', 'c++', '-'], '#include <gloo/config.h>\nweft_probe GLOO_VERSION_MAJOR GLOO_VERSION_MINOR GLOO_VERSION_PATCH GLOO_HAVE_TRANSPORT_TCP\n');
  if (!probe.ok) return { available: false, reason: 'Gloo headers not found (<gloo/config.h>); apt-get install libgloo-dev, or set WEFT_GLOO_PREFIX' };
  const line = probe.out.split('\n').find((l) => l.startsWith('weft_probe '));
  const [major, minor, patch, tcp] = (line ?? '').split(/\s+/).slice(1);
  const version = `${major}.${minor}.${patch}`;
  if (tcp !== '1') return { available: false, reason: `Gloo ${version} was built without its tcp transport`, version };
  const libDir = libs.find((f) => f.startsWith('-L'))?.slice(2);
  const found = libDir ? existsSync(path.join(libDir, 'libgloo.so')) : path.isAbsolute(run(cc, ['-print-file-name=libgloo.so']).out.trim());
  if (!found) return { available: false, reason: 'libgloo.so not found; apt-get install libgloo-dev, or set WEFT_GLOO_PREFIX', version };
  return { available: true, version };
}

function detectMpi(): PeerStatus {
  const cc = run('mpicc', ['--showme:version']);
  if (!cc.ok) return { available: false, reason: 'no mpicc (Open MPI); apt-get install libopenmpi-dev openmpi-bin' };
  const v = run('mpirun', ['--version']);
  if (!v.ok) return { available: false, reason: 'no mpirun; apt-get install openmpi-bin' };
  const m = /\(Open MPI\)\s*(\S+)/.exec(v.out) ?? /Open MPI\s+(\S+)/.exec(cc.out + cc.err);
  if (!/Open MPI/.test(v.out)) return { available: false, reason: `mpirun is not Open MPI (${v.out.split('\n')[0]}); the harness passes Open MPI's --mca flags` };
  return { available: true, version: m?.[1] };
}

let detected: PeerAvailability | undefined;

/** Which peers can be built and run here (cached; a few compiler and mpirun probes). */
export function detect(): PeerAvailability {
  detected ??= { gloo: detectGloo(), mpi: detectMpi() };
  return detected;
}

function mtime(file: string): number {
  try {
    return statSync(file).mtimeMs;
  } catch {
    return -1;
  }
}

export interface PeerBuild {
  binary: string;
  /** False when the binary was already newer than its source. */
  rebuilt: boolean;
  /** The compile command, when it ran. */
  command?: string;
}

/**
 * Compiles a harness into `binDir` unless the binary is newer than its source (or `force`).
 * Compiles to a temporary name and renames, so concurrent builds never see half a binary.
 * Rejects with the compiler's output when compilation fails.
 */
export async function buildPeer(name: HarnessName, opts: { binDir?: string; force?: boolean } = {}): Promise<PeerBuild> {
  const src = path.join(SOURCE_DIR, SOURCES[name]);
  const dir = opts.binDir ?? DEFAULT_BIN_DIR;
  const binary = path.join(dir, BINARIES[name]);
  const srcTime = mtime(src);
  if (srcTime < 0) throw new Error(`${name} harness source missing: ${src}`);
  if (!opts.force && mtime(binary) >= srcTime) return { binary, rebuilt: false };
  mkdirSync(dir, { recursive: true });
  const tmp = `${binary}.tmp-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
  let cmd: string;
  let args: string[];
  if (name === 'gloo') {
    const { cflags, libs } = glooFlags();
    cmd = cxx();
    args = ['-O2', '-std=c++17', '-Wall', ...cflags, '-o', tmp, src, ...libs, '-pthread'];
  } else if (name === 'mpi') {
    cmd = 'mpicc';
    args = ['-O2', '-Wall', '-o', tmp, src, '-lm'];
  } else {
    cmd = cc();
    args = ['-O2', '-Wall', '-o', tmp, src, '-pthread'];
  }
  const command = [cmd, ...args].join(' ');
  const { code, output } = await new Promise<{ code: number | null; output: string }>((resolve) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (d) => (output += d));
    child.stderr.on('data', (d) => (output += d));
    child.on('error', (err) => resolve({ code: -1, output: `${output}${err.message}` }));
    child.on('close', (c) => resolve({ code: c, output }));
  });
  if (code !== 0) {
    try {
      unlinkSync(tmp);
    } catch {
      // nothing was written
    }
    const lines = output.trim().split('\n');
    const shown = lines.length > 40 ? [...lines.slice(0, 30), `... (${lines.length - 30} more lines)`] : lines;
    throw new Error(`building the ${name} harness failed (exit ${code}):\n  ${command}\n${shown.map((l) => `  | ${l}`).join('\n')}`);
  }
  renameSync(tmp, binary);
  return { binary, rebuilt: true, command };
}

function checkOptions(where: string, o: PeerRunOptions): void {
  if (!Number.isInteger(o.np) || o.np < 1) throw new RangeError(`${where}: np must be a positive integer, not ${o.np}`);
  if (o.ops.length === 0 || !o.ops.every(isCollectiveOp)) throw new RangeError(`${where}: ops must be among ${COLLECTIVE_OPS.join(', ')}`);
  if (o.ops.some((op) => op !== 'barrier') && (o.sizes.length === 0 || !o.sizes.every((s) => Number.isInteger(s) && s > 0))) throw new RangeError(`${where}: sizes must be positive integers`);
  if (!(o.iters >= 1) || !(o.warmup >= 0)) throw new RangeError(`${where}: need iters >= 1 and warmup >= 0`);
}

/** The sweep's flags, as both harnesses take them. */
export function harnessArgs(o: PeerRunOptions): string[] {
  return ['--ops', o.ops.join(','), '--sizes', o.sizes.join(','), '--iters', String(o.iters), '--warmup', String(o.warmup), '--byte-budget', String(o.byteBudget ?? 0)];
}

const NUMBER_FIELDS = ['np', 'bytes', 'iters', 'median_us', 'min_us', 'p90_us'] as const;

/** The JSON lines of rank 0, checked: one row per (op, size), barrier once, at the sizes asked. */
export function parseRows(system: PeerRow['system'], results: LaunchResult[], o: PeerRunOptions): PeerRow[] {
  const rows: PeerRow[] = [];
  for (const line of results[0].stdout.split('\n')) {
    if (!line.startsWith('{')) continue;
    let row: PeerRow;
    try {
      row = JSON.parse(line) as PeerRow;
    } catch {
      throw new PeerRunError(`${system}: unparsable output line: ${line}\n${describe(results)}`, results);
    }
    const bad = NUMBER_FIELDS.find((k) => typeof row[k] !== 'number' || !Number.isFinite(row[k]));
    if (row.system !== system || !isCollectiveOp(row.op) || bad) throw new PeerRunError(`${system}: malformed row (${bad ?? 'system/op'}): ${line}`, results);
    rows.push(row);
  }
  const want = o.ops.flatMap((op) => (op === 'barrier' ? [`barrier/0`] : o.sizes.map((s) => `${op}/${caseBytes(op, s, o.np)}`)));
  const got = rows.map((r) => `${r.op}/${r.bytes}`);
  if (want.join(' ') !== got.join(' ')) {
    throw new PeerRunError(`${system}: expected rows ${want.join(' ')} but got ${got.join(' ') || 'none'}\n${describe(results)}`, results);
  }
  return rows;
}

/**
 * Runs the sweep on Gloo: np gloo-bench processes (tcp transport on 127.0.0.1) meeting in a
 * fresh FileStore directory, removed afterwards. Builds the harness first if needed.
 */
export async function runGloo(o: PeerRunOptions): Promise<PeerRow[]> {
  checkOptions('runGloo', o);
  const status = detect().gloo;
  if (!status.available) throw new Error(`Gloo peer unavailable: ${status.reason}`);
  const { binary } = await buildPeer('gloo', { binDir: o.binDir });
  const storeDir = mkdtempSync(path.join(tmpdir(), 'weft-gloo-store-'));
  const removeStore = () => rmSync(storeDir, { recursive: true, force: true });
  const forget = onAbandon(removeStore);
  try {
    const common = ['--size', String(o.np), '--store-dir', storeDir, '--timeout-ms', String(o.timeoutMs), ...harnessArgs(o)];
    const launches = Array.from({ length: o.np }, (_, rank) => ({ label: `gloo-bench rank ${rank}`, command: binary, args: ['--rank', String(rank), ...common] }));
    const results = await runAll(launches, { name: `gloo np=${o.np}`, timeoutMs: o.timeoutMs });
    return parseRows('gloo', results, o);
  } finally {
    forget();
    removeStore();
  }
}

/** mpirun's arguments for a BTL: ob1 with the chosen BTLs, default collectives (coll tuned). */
export function mpirunArgs(np: number, btl: MpiBtl): string[] {
  const root = typeof process.getuid === 'function' && process.getuid() === 0 ? ['--allow-run-as-root'] : [];
  const transport = btl === 'sm' ? ['--mca', 'btl', 'self,vader'] : ['--mca', 'btl', 'self,tcp', '--mca', 'btl_tcp_if_include', 'lo'];
  return [
    ...root,
    '-np', String(np),
    '--oversubscribe', // more ranks than cores is fine for a benchmark on a small machine
    '--bind-to', 'none', // like the Gloo and weft processes, which are not pinned either
    '--mca', 'pml', 'ob1', // BTL-based point-to-point: no UCX, no libfabric MTL
    '--mca', 'mtl', '^ofi',
    '--mca', 'osc', '^ucx', // no one-sided window is used; skip UCX's start-up
    ...transport,
  ];
}

/** Runs the sweep on Open MPI under mpirun, with shared memory (vader) or tcp over lo. */
export async function runMpi(o: MpiRunOptions): Promise<PeerRow[]> {
  checkOptions('runMpi', o);
  if (o.btl !== 'sm' && o.btl !== 'tcp') throw new RangeError(`runMpi: btl must be 'sm' or 'tcp', not ${String(o.btl)}`);
  const status = detect().mpi;
  if (!status.available) throw new Error(`Open MPI peer unavailable: ${status.reason}`);
  const { binary } = await buildPeer('mpi', { binDir: o.binDir });
  const args = [...mpirunArgs(o.np, o.btl), binary, '--provider', o.btl, ...harnessArgs(o)];
  const results = await runAll([{ label: `mpirun (${o.btl})`, command: 'mpirun', args }], { name: `openmpi ${o.btl} np=${o.np}`, timeoutMs: o.timeoutMs, termGraceMs: 2000 });
  return parseRows('openmpi', results, o);
}

// ---------------------------------------------------------------------------------------------
// CLI

function formatUs(us: number): string {
  if (us >= 1e4) return `${(us / 1e3).toFixed(1)} ms`;
  if (us >= 1e3) return `${(us / 1e3).toFixed(2)} ms`;
  return `${us.toFixed(us >= 100 ? 0 : us >= 10 ? 1 : 2)} us`;
}

function formatSize(bytes: number): string {
  for (const [unit, scale] of [['GiB', 1 << 30], ['MiB', 1 << 20], ['KiB', 1 << 10]] as const) {
    if (bytes >= scale && bytes % scale === 0) return `${bytes / scale} ${unit}`;
  }
  return `${bytes} B`;
}

function formatGbps(x: number | null): string {
  return x === null ? '-' : x.toFixed(x >= 10 ? 1 : x >= 1 ? 2 : 3);
}

/** The table of a peer run: one line per (system, provider, np, op, size). */
export function peersTable(rows: CollectiveResult[]): string {
  return table(
    ['system', 'provider', 'np', 'op', 'size', 'iters', 'median', 'min', 'p90', 'algbw GB/s', 'busbw GB/s'],
    rows.map((r) => [r.system, r.provider, String(r.np), r.op, r.op === 'barrier' ? '-' : formatSize(r.bytes), String(r.iters), formatUs(r.median_us), formatUs(r.min_us), formatUs(r.p90_us), formatGbps(r.algbw_gbps), formatGbps(r.busbw_gbps)]),
  );
}

export const PEER_SYSTEMS = ['gloo', 'mpi-sm', 'mpi-tcp'] as const;
export type PeerSystem = (typeof PEER_SYSTEMS)[number];

/** Runs `systems` at each np; a peer that is missing or fails is reported on stderr and skipped. */
export async function runPeers(systems: PeerSystem[], nps: number[], base: Omit<PeerRunOptions, 'np'>, onRow?: (r: CollectiveResult) => void): Promise<CollectiveResult[]> {
  const avail = detect();
  const out: CollectiveResult[] = [];
  for (const system of systems) {
    const peer = system === 'gloo' ? avail.gloo : avail.mpi;
    if (!peer.available) {
      process.stderr.write(`  ${system}: skipped: ${peer.reason}\n`);
      continue;
    }
    for (const np of nps) {
      try {
        const rows = system === 'gloo' ? await runGloo({ ...base, np }) : await runMpi({ ...base, np, btl: system === 'mpi-sm' ? 'sm' : 'tcp' });
        for (const r of rows.map(withBandwidth)) {
          out.push(r);
          onRow?.(r);
        }
      } catch (err) {
        process.stderr.write(`  ${system} np=${np}: failed: ${(err as Error).message}\n`);
      }
    }
  }
  return out;
}

/** `weft bench peers`: the peers alone. */
export function peersCommand(): Command {
  return new Command('peers')
    .description('Gloo and Open MPI collectives, from weft\'s own harnesses (bench/peers/)')
    .option('--np <list>', 'comma-separated process counts', '2')
    .option('--ops <list>', `comma-separated ops (${COLLECTIVE_OPS.join(', ')})`, 'allreduce')
    .option('--sizes <list>', 'sizes: "8,1M,64MiB" or a sweep "8..64M:4"', '8,1048576,67108864')
    .option('--systems <list>', `comma-separated (${PEER_SYSTEMS.join(', ')})`, PEER_SYSTEMS.join(','))
    .option('--iters <n>', 'timed iterations per size', '20')
    .option('--warmup <n>', 'warmup iterations per size', '3')
    .option('--byte-budget <bytes>', 'cap timed iterations at max(3, budget / size) (0: none)', '512M')
    .option('--timeout <ms>', 'per peer run', '120000')
    .option('--json', 'print one JSON object per line')
    .option('--detect', 'only print which peers are available')
    .option('--quick', 'smoke test: allreduce of 8 B and 64 KiB, 10 iterations (options given explicitly win)')
    .action((o: Parameters<typeof runPeersCommand>[0] & { quick?: boolean }, cmd: Command) => runPeersCommand(applyQuick(o, cmd, { sizes: '8,65536', iters: '10' })));
}

async function runPeersCommand(o: { np: string; ops: string; sizes: string; systems: string; iters: string; warmup: string; byteBudget: string; timeout: string; json?: boolean; detect?: boolean }): Promise<void> {
  if (o.detect) {
    console.log(JSON.stringify(detect(), null, 2));
    return;
  }
  const ops = o.ops.split(',').map((s) => s.trim());
  const badOp = ops.find((op) => !isCollectiveOp(op));
  if (badOp) throw new Error(`unknown op ${badOp} (${COLLECTIVE_OPS.join(', ')})`);
  const systems = o.systems.split(',').map((s) => s.trim());
  const badSystem = systems.find((s) => !(PEER_SYSTEMS as readonly string[]).includes(s));
  if (badSystem) throw new Error(`unknown system ${badSystem} (${PEER_SYSTEMS.join(', ')})`);
  const base = { ops: ops as CollectiveOp[], sizes: parseSizes(o.sizes), iters: Number(o.iters), warmup: Number(o.warmup), byteBudget: o.byteBudget.trim() === '0' ? 0 : parseSize(o.byteBudget), timeoutMs: Number(o.timeout) };
  const rows = await runPeers(systems as PeerSystem[], o.np.split(',').map(Number), base, (r) => {
    if (o.json) console.log(JSON.stringify(r));
    else process.stderr.write(`  ${r.system} ${r.provider} np=${r.np} ${r.op} ${formatSize(r.bytes)}: ${formatUs(r.median_us)}\n`);
  });
  if (!o.json) console.log(peersTable(rows));
  if (rows.length === 0) process.exitCode = 1;
}

runIfMain(import.meta.url, peersCommand);

/**
 * `weft bench collectives --hosts H`: the sweep on a job spread over H emulated hosts
 * (harness/emulated-hosts.ts: network namespaces on a bridge, each with its own hostname and
 * /dev/shm), K ranks per host, with in the same run:
 * - weft, default (shared memory inside a host, libfabric tcp between hosts, hierarchical
 *   collectives): rows 'weft' / 'weft-sync', provider 'hosts';
 * - weft with every pair on the fabric and the flat algorithms (WEFT_PROVIDER=ofi,
 *   hierarchical: false): provider 'hosts-flat-ofi';
 * - Open MPI over the same namespaces (mpirun in host 0 starts its daemons on the others
 *   through the harness's rsh agent; ob1 with vader inside a host and tcp on eth0 between);
 * - Gloo's tcp transport (one process per rank on its host, listening on the host's address);
 * - for allreduce from 1 MiB on 2 hosts, the floors (link-floor.ts): the bare TCP transfer of the
 *   bytes every allreduce between them moves, and the memory work of a host's core (estimates).
 * Needs root (namespaces). Prints a table per op with ratios and the issue's targets; writes
 * JSON and SVG like the one-host sweep.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { EmulatedHosts } from '../../harness/emulated-hosts.js';
import { runOnHosts } from '../../harness/host-jobs.js';
import { buildPeer, detect, harnessArgs, parseRows, type PeerRunOptions } from '../peers/index.js';
import { finished } from '../peers/spawn.js';
import { resultsDir, table } from '../lib/stats.js';
import { aggregate, type AggregatedRow } from './aggregate.js';
import { LINK_FLOOR, withBandwidth, type CollectiveResult, type CollectiveRow } from './metrics.js';
import { ROW_PREFIX, type RankPlan } from './plan.js';
import { hostFloor, measureLinkFloor, measureMemoryFloor } from './link-floor.js';
import { formatSize, formatUs } from './report.js';

const RANK_SCRIPT = path.join(path.dirname(fileURLToPath(import.meta.url)), 'rank.js');

/** The sweep every rank runs (as the one-host bench), and how the ranks spread over hosts. */
export interface HostsBenchOptions extends Pick<RankPlan, 'ops' | 'sizes' | 'iters' | 'warmup' | 'byteBudget' | 'variants'> {
  hosts: number;
  perHost: number;
  runs: number;
  json: boolean;
  out?: string;
  plot?: string | false;
  timeoutMs: number;
  /** Peers to run beside weft (`--peers`): undefined runs Open MPI and Gloo, [] neither. */
  peers?: readonly string[];
}

/** The rows' provider names. */
export const HOSTS = 'hosts';
export const HOSTS_FLAT = 'hosts-flat-ofi';

function weftRows(out: string, provider: string): CollectiveResult[] {
  const rows: CollectiveResult[] = [];
  for (const line of out.split('\n')) {
    const at = line.indexOf(ROW_PREFIX);
    if (at >= 0) rows.push(withBandwidth({ ...(JSON.parse(line.slice(at + ROW_PREFIX.length)) as CollectiveRow), provider }));
  }
  return rows;
}

async function runWeftOnHosts(h: EmulatedHosts, o: HostsBenchOptions, flat: boolean): Promise<CollectiveResult[]> {
  const provider = flat ? HOSTS_FLAT : HOSTS;
  const plan: RankPlan = { ops: o.ops, sizes: o.sizes, iters: o.iters, warmup: o.warmup, byteBudget: o.byteBudget, variants: o.variants, provider, timeoutMs: 60_000, hierarchical: !flat };
  const r = await runOnHosts(h, {
    perHost: new Array(o.hosts).fill(o.perHost),
    script: RANK_SCRIPT,
    args: [JSON.stringify(plan)],
    store: { kind: 'master', host: 0, port: 29500, secret: randomBytes(16).toString('hex') },
    // Each emulated host has its share of this machine's cores (WEFT_CORES, the harness's
    // ownCores), so ranks that outnumber them yield instead of spinning, as Open MPI is told
    // to (mpi_yield_when_idle).
    env: { WEFT_CORES: String(Math.max(1, Math.floor(cpus().length / o.hosts))), ...(flat ? { WEFT_PROVIDER: 'ofi' } : {}) },
    hostEnv: Object.fromEntries(h.hosts.filter((x) => x.cpuCount !== undefined).map((x) => [x.index, { WEFT_CORES: String(x.cpuCount) }])),
    timeoutMs: o.timeoutMs,
  });
  if (r.codes.some((c) => c !== 0)) throw new Error(`weft over ${provider} failed (exit codes ${r.codes.join(', ')}):\n${r.out.slice(-3000)}`);
  return weftRows(r.outs[0], provider);
}

function peerOptions(o: HostsBenchOptions): PeerRunOptions {
  return { np: o.hosts * o.perHost, ops: o.ops, sizes: o.sizes, iters: o.iters, warmup: o.warmup, timeoutMs: o.timeoutMs, byteBudget: o.byteBudget };
}

async function runMpiOnHosts(h: EmulatedHosts, o: HostsBenchOptions): Promise<CollectiveResult[]> {
  const { binary } = await buildPeer('mpi');
  const hostList = h.hosts.map((x) => `${x.hostname}:${o.perHost}`).join(',');
  const args = [
    '--allow-run-as-root', '--host', hostList, '-np', String(o.hosts * o.perHost),
    '--mca', 'plm_rsh_agent', h.rshAgent(),
    // More ranks than a host's cores. Open MPI busy-polls unless told to yield, and then every
    // message waits for a scheduler slice (8 ms here). Its daemons and ranks inherit their
    // host's cores from the rsh agent.
    '--bind-to', 'none', '--oversubscribe', '--mca', 'mpi_yield_when_idle', '1',
    '--mca', 'pml', 'ob1', '--mca', 'mtl', '^ofi', '--mca', 'osc', '^ucx',
    '--mca', 'btl', 'self,vader,tcp', '--mca', 'btl_tcp_if_include', 'eth0', '--mca', 'oob_tcp_if_include', 'eth0',
    binary, '--provider', HOSTS, ...harnessArgs(peerOptions(o)),
  ];
  const res = await finished(h.spawn(0, 'mpirun', args), 'mpirun (hosts)', o.timeoutMs);
  if (res.code !== 0) throw new Error(`Open MPI over emulated hosts failed (exit ${res.code}): ${res.stderrTail}`);
  return parseRows('openmpi', [res], peerOptions(o)).map((r) => withBandwidth({ ...r, provider: HOSTS }));
}

async function runGlooOnHosts(h: EmulatedHosts, o: HostsBenchOptions): Promise<CollectiveResult[]> {
  const { binary } = await buildPeer('gloo');
  const np = o.hosts * o.perHost;
  const storeDir = mkdtempSync(path.join(tmpdir(), 'weft-gloo-hosts-'));
  try {
    const common = ['--size', String(np), '--store-dir', storeDir, '--timeout-ms', String(o.timeoutMs), ...harnessArgs(peerOptions(o))];
    const runs = [...Array(np).keys()].map((rank) => {
      const host = Math.floor(rank / o.perHost);
      const child = h.spawn(host, binary, ['--rank', String(rank), ...common], { env: { ...process.env, GLOO_HOSTNAME: h.hosts[host].address } });
      return finished(child, `gloo-bench rank ${rank}`, o.timeoutMs);
    });
    const results = await Promise.all(runs);
    const bad = results.find((r) => r.code !== 0);
    if (bad) throw new Error(`Gloo over emulated hosts failed (${bad.label}: exit ${bad.code}): ${bad.stderrTail}`);
    return parseRows('gloo', results, peerOptions(o)).map((r) => withBandwidth({ ...r, provider: HOSTS }));
  } finally {
    rmSync(storeDir, { recursive: true, force: true });
  }
}

/** One table per op: weft (hierarchical, both APIs), weft flat on ofi, Open MPI, Gloo, and ratios (peer time / weft time). */
export function hostsTables(rows: AggregatedRow[]): string {
  const get = (system: string, provider: string, op: string, bytes: number) => rows.find((r) => r.system === system && r.provider === provider && r.op === op && r.bytes === bytes);
  const ratio = (peer: { median_us: number } | undefined, w: { median_us: number } | undefined) => (peer && w ? `${(peer.median_us / w.median_us).toFixed(2)}x` : '-');
  const out: string[] = [];
  for (const op of [...new Set(rows.map((r) => r.op))]) {
    const sizes = [...new Set(rows.filter((r) => r.op === op && r.system.startsWith('weft')).map((r) => r.bytes))].sort((a, b) => a - b);
    // The floors (allreduce from 1 MiB, link-floor.ts): the bare transfer every 2-host allreduce
    // makes, that plus the memory work of a host's core, and Gloo's time over the latter.
    const withLink = rows.some((r) => r.op === op && r.system === 'floor' && r.provider === LINK_FLOOR);
    const header = ['size', 'weft', 'weft-sync', 'flat ofi', 'openmpi', 'gloo', 'vs openmpi', 'vs gloo', 'vs flat ofi', ...(withLink ? ['link floor', 'host floor', 'gloo / host floor'] : [])];
    const body = sizes.map((b) => {
      const w = get('weft', HOSTS, op, b);
      const s = get('weft-sync', HOSTS, op, b);
      const best = w && s ? (w.median_us <= s.median_us ? w : s) : (w ?? s);
      const flat = get('weft', HOSTS_FLAT, op, b) ?? get('weft-sync', HOSTS_FLAT, op, b);
      const mpi = get('openmpi', HOSTS, op, b);
      const gloo = get('gloo', HOSTS, op, b);
      const cells = [op === 'barrier' ? '-' : formatSize(b), formatUs(w?.median_us), formatUs(s?.median_us), formatUs(flat?.median_us), formatUs(mpi?.median_us), formatUs(gloo?.median_us), ratio(mpi, best), ratio(gloo, best), ratio(flat, best)];
      if (!withLink) return cells;
      const link = get('floor', LINK_FLOOR, op, b);
      const host = hostFloor(rows, b);
      return [...cells, formatUs(link?.median_us), formatUs(host?.total), ratio(gloo, host && { median_us: host.total })];
    });
    const legend = withLink ? `\nlink floor: the bytes any allreduce between the 2 hosts moves, each way at once over one TCP connection (tcp-link);\nhost floor: that plus one sum-kernel pass and one memcpy of the array on one core, as an emulated host's core must do;\nestimates measured in their own minute, not bounds: a system can come in under them` : '';
    out.push(`${op} across emulated hosts (median of the max over ranks; ratios: peer time / weft's better API)\n${table(header, body)}${legend}`);
  }
  return out.join('\n\n');
}

/** The issue's targets for 2 hosts x 2 ranks. */
export function hostsTargets(rows: AggregatedRow[]): string[] {
  const ar = (system: string, provider: string, bytes: number) => rows.find((r) => r.system === system && r.provider === provider && r.op === 'allreduce' && r.bytes === bytes);
  const best = (bytes: number) => {
    const a = ar('weft', HOSTS, bytes);
    const b = ar('weft-sync', HOSTS, bytes);
    return a && b ? (a.median_us <= b.median_us ? a : b) : (a ?? b);
  };
  const sizes = [...new Set(rows.filter((r) => r.op === 'allreduce' && r.provider === HOSTS && r.system.startsWith('weft')).map((r) => r.bytes))].sort((a, b) => a - b);
  const lines: string[] = [];
  const worst = (peer: string, provider: string, min: number) => {
    let w: { x: number; at: number } | undefined;
    for (const b of sizes.filter((s) => s >= min)) {
      const p = ar(peer, provider, b);
      const m = best(b);
      if (!p || !m) continue;
      const x = p.median_us / m.median_us;
      if (!w || x < w.x) w = { x, at: b };
    }
    return w;
  };
  const verdict = (w: { x: number; at: number } | undefined, need: number) => (w ? `worst ${w.x.toFixed(2)}x at ${formatSize(w.at)}: ${w.x >= need ? 'met' : 'NOT met'}` : 'not measured');
  lines.push(`  hierarchical allreduce >= 1.0x Open MPI at every size >= 64 KiB: ${verdict(worst('openmpi', HOSTS, 64 << 10), 1)}`);
  const g = worst('gloo', HOSTS, 0);
  const floor = g && hostFloor(rows, g.at);
  const glooAt = g && ar('gloo', HOSTS, g.at);
  // Where it is not met, how far the floors of this run would allow.
  const bound = g && g.x < 3 && floor && glooAt ? ` (host floor there ${formatUs(floor.total)} = link ${formatUs(floor.link)} + sum ${formatUs(floor.sum)} + copy ${formatUs(floor.copy)}: Gloo / host floor = ${(glooAt.median_us / floor.total).toFixed(2)}x)` : '';
  lines.push(`  hierarchical allreduce >= 3x Gloo tcp at every size: ${verdict(g, 3)}${bound}`);
  const mib = best(1 << 20);
  const flat = ar('weft', HOSTS_FLAT, 1 << 20) ?? ar('weft-sync', HOSTS_FLAT, 1 << 20);
  lines.push(`  hierarchical allreduce >= 1.5x weft's flat all-ofi ring at 1 MiB: ${mib && flat ? `${(flat.median_us / mib.median_us).toFixed(2)}x: ${flat.median_us / mib.median_us >= 1.5 ? 'met' : 'NOT met'}` : 'not measured'}`);
  const eight = best(8);
  const mpi8 = ar('openmpi', HOSTS, 8);
  lines.push(`  8 B allreduce within 1.5x of Open MPI's: ${eight && mpi8 ? `${formatUs(eight.median_us)} vs ${formatUs(mpi8.median_us)} = ${(eight.median_us / mpi8.median_us).toFixed(2)}x: ${eight.median_us <= 1.5 * mpi8.median_us ? 'met' : 'NOT met'}` : 'not measured'}`);
  return lines;
}

/** Runs the sweep on emulated hosts (weft, weft flat, Open MPI, Gloo), `runs` times; prints and writes results. */
export async function benchCollectivesOnHosts(o: HostsBenchOptions): Promise<{ rows: AggregatedRow[]; failures: string[]; file: string }> {
  const why = EmulatedHosts.unavailable();
  if (why) throw new Error(`weft bench collectives --hosts: ${why}`);
  const started = new Date();
  const loadBefore = loadavg();
  const raw: CollectiveResult[] = [];
  const failures: string[] = [];
  const avail = detect();
  // Open MPI runs over tcp between the emulated hosts whichever of its names is asked for.
  const wantMpi = o.peers === undefined || o.peers.some((p) => p.startsWith('mpi'));
  const wantGloo = o.peers === undefined || o.peers.includes('gloo');
  // Each host gets cores of its own, as real hosts have (every system alike): with the hosts
  // sharing both cores, ranks of two hosts took turns on one core that real hosts would run
  // side by side (2 x 2, 1 MiB: 2.28-2.39 ms against 1.58-1.83 ms with a core per host).
  const h = await EmulatedHosts.create(o.hosts, { ownCores: true });
  const progress = (rs: CollectiveResult[]) => {
    for (const r of rs) process.stderr.write(`  ${r.system} ${r.provider} np=${r.np} ${r.op}${r.op === 'barrier' ? '' : ` ${formatSize(r.bytes)}`}: ${formatUs(r.median_us)}\n`);
    raw.push(...rs);
  };
  const attempt = async (name: string, f: () => Promise<CollectiveResult[]>) => {
    try {
      progress(await f());
    } catch (err) {
      failures.push(`${name}: ${(err as Error).message}`);
      process.stderr.write(`  ${name} failed: ${(err as Error).message.split('\n')[0]}\n`);
    }
  };
  try {
    for (let run = 1; run <= o.runs; run++) {
      if (o.runs > 1) process.stderr.write(`run ${run} of ${o.runs}\n`);
      await attempt('weft (hierarchical)', () => runWeftOnHosts(h, o, false));
      await attempt('weft (flat, all ofi)', () => runWeftOnHosts(h, o, true));
      // The floors are for 2 hosts, whose allreduce moves exactly S bytes each way between them.
      // Their own iteration count: 9 timed transfers give a stable median in under a second at 32 MiB.
      if (o.ops.includes('allreduce') && o.hosts === 2) {
        await attempt('link floor (tcp-link)', () => measureLinkFloor(h, { sizes: o.sizes, np: o.hosts * o.perHost, iters: 9, timeoutMs: o.timeoutMs }));
        await attempt('memory floor', async () => measureMemoryFloor(o.sizes, o.hosts * o.perHost));
      }
      if (!wantMpi) {
        // not asked for (--peers)
      } else if (avail.mpi.available) await attempt('openmpi', () => runMpiOnHosts(h, o));
      else failures.push(`openmpi: skipped: ${avail.mpi.reason}`);
      if (!wantGloo) {
        // not asked for (--peers)
      } else if (avail.gloo.available) await attempt('gloo', () => runGlooOnHosts(h, o));
      else failures.push(`gloo: skipped: ${avail.gloo.reason}`);
    }
  } finally {
    await h.destroy();
  }
  const rows = aggregate(raw);
  const file = path.resolve(o.out ?? path.join(resultsDir(), `collectives-hosts-${started.toISOString().replace(/[:.]/g, '-')}.json`));
  const targets = hostsTargets(rows);
  const meta = { date: started.toISOString(), seconds: (Date.now() - started.getTime()) / 1000, node: process.version, cpus: cpus().length, loadavg_before: loadBefore, loadavg_after: loadavg(), hosts: o.hosts, perHost: o.perHost, peers: { gloo: avail.gloo.version ?? avail.gloo.reason, openmpi: avail.mpi.version ?? avail.mpi.reason }, options: { ...o, out: undefined, plot: undefined }, failures };
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, JSON.stringify({ meta, rows, targets, raw }, null, 2));
  if (o.json) for (const r of rows) console.log(JSON.stringify(r));
  else console.log(`${meta.date}, ${meta.cpus} cores, ${o.hosts} emulated hosts x ${o.perHost} ranks, load average ${loadBefore.map((x) => x.toFixed(1)).join(' ')}, ${o.runs} run(s)\n\n${hostsTables(rows)}\n\ntargets (medians of this run):\n${targets.join('\n')}`);
  for (const f of failures) process.stderr.write(`failed: ${f}\n`);
  process.stderr.write(`results: ${file}\n`);
  if (o.plot !== false && rows.some((r) => r.op === 'allreduce')) {
    try {
      const { plotCollectives } = await import('./plot.js');
      const files = await plotCollectives(rows, o.plot ?? file.replace(/\.json$/, ''), `${o.hosts} emulated hosts x ${o.perHost} ranks, ${started.toISOString().slice(0, 10)}`);
      process.stderr.write(`plots: ${files.join(', ')}\n`);
    } catch (err) {
      process.stderr.write(`plots skipped (${(err as Error).message.split('\n')[0]})\n`);
    }
  }
  return { rows, failures, file };
}

/**
 * `weft sim daemon-loop`: the deterministic model of the delegation daemon loop behind the CQE
 * batching memo (docs/bistability.md). Runs every (NP, controller) pair, then each controller
 * again through an induced collapse; prints a table, writes JSON rows and SVG plots.
 *
 *   weft sim daemon-loop --np 2,4,8,16,32 --controllers none,fixed:16,adaptive,min-batch,batch-hold
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Command, InvalidArgumentError, Option } from 'commander';
import { createPollController, POLL_CONTROLLER_SPECS } from 'weftjs/rpc';
import { applyQuick, integerAtLeast, runIfMain } from '../../lib/command.js';
import { resultsDir } from '../../lib/stats.js';
import { checkParams, DEFAULT_PARAMS, itemUs, type DaemonLoopParams } from './params.js';
import { runJobs } from './pool.js';
import { formatTable, plotSim, toRows } from './report.js';
import type { SimResult } from './model.js';

interface SimOptions {
  np: number[];
  controllers: string[];
  recovery: boolean;
  collapseAtMs: number;
  collapseForMs: number;
  seriesNp: number[];
  threads: number;
  quick: boolean;
  json: boolean;
  out?: string;
  plots: boolean;
}

const list = (parse: (s: string) => number) => (v: string) => v.split(',').map((s) => parse(s.trim()));
const integer = integerAtLeast;
const number = (v: string) => {
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0) throw new InvalidArgumentError('a number >= 0');
  return n;
};
const controllerList = (v: string) =>
  v.split(',').map((s) => {
    const c = s.trim();
    try {
      createPollController(c);
    } catch {
      throw new InvalidArgumentError(`'${c}': each controller is ${POLL_CONTROLLER_SPECS}`);
    }
    return c;
  });

/** The model's parameters as options: --write-us, --rtt-us, ... (kebab case of params.ts). */
const PARAM_HELP: Partial<Record<keyof DaemonLoopParams, string>> = {
  clients: 'client threads per rank',
  qd: 'requests in flight per client',
  durationMs: 'simulated time, ms (the memo ran 10 s; the equilibria settle within a few ms)',
  warmupMs: 'metrics start here, ms',
  seed: 'seed of every random draw (targets, jitter)',
  rttUs: 'round trip of a one-message WRITE and its answer, idle, us',
  jitterUs: 'mean exponential delay added to each WRITE, us',
  writeUs: 'time a WRITE occupies its rank-to-rank connection, us (calibrated: docs/bistability.md)',
  messageUs: 'added occupancy per message in a WRITE, us',
  ipcUs: 'step A (IPC poll) cost per loop, us',
  ringUs: 'step B (delegation ring poll) cost per loop, us',
  pollUs: 'step C: cost of one CQ poll, us',
  cqeUs: 'step C: cost per completion (WRITE), us',
  requestUs: 'step C: cost per request served, us',
  responseUs: 'step C: cost per response handed to a client, us',
  callUs: 'step D: cost per call issued, us',
  flushUs: 'step F: fixed flush cost, us',
  postUs: 'step F: cost per WRITE posted, us',
  clientUs: "a client's turnaround from response to next request, us",
  ringTakeMax: 'step B takes at most this many requests per loop (0 = all ready ones)',
  hotShare: 'share of requests sent to rank 0 (skewed targets; 0 = uniform)',
  startBurst: 'requests per rank sent at time 0 (the initial burst)',
  startSpreadUs: "the rest of the clients' first requests spread over this many us",
  binUs: 'series bin, us',
  seriesMs: 'fine series length, ms',
};
const kebab = (s: string) => s.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);

export function daemonLoopCommand(): Command {
  const cmd = new Command('daemon-loop')
    .description('deterministic model of the delegation daemon loop (the CQE batching memo): Mops, CQE batch, outstanding per NP and poll controller')
    .option('--np <list>', 'ranks, comma-separated', list(integer(2)), [2, 4, 8, 16, 32])
    .option('--controllers <list>', `poll controllers (${POLL_CONTROLLER_SPECS}), comma-separated`, controllerList, ['none', 'fixed:16', 'adaptive', 'min-batch', 'batch-hold'])
    .option('--no-recovery', 'skip the induced-collapse runs')
    .option('--collapse-at-ms <ms>', 'induced collapse, in runs that start with every request at once (high at every NP): the clients stall at <ms> (after the adaptive warm-up)...', number, 10)
    .option('--collapse-for-ms <ms>', '...for <ms>, then come back thinly over --start-spread-us; the recovery is timed from there', number, 1)
    .option('--series-np <list>', 'NP values whose time series are plotted', list(integer(2)), [8, 16])
    .option('--threads <n>', 'worker threads (default: one per core)', integer(1), 0)
    .option('--quick', 'a short run: NP 4,8,16, 8 ms simulated')
    .option('--json', 'print the JSON rows instead of the table')
    .option('--out <file>', 'also write the JSON rows here')
    .option('--no-plots', 'skip the SVG plots');
  for (const [key, help] of Object.entries(PARAM_HELP) as [keyof DaemonLoopParams, string][]) {
    const def = DEFAULT_PARAMS[key];
    const parse = Number.isInteger(def) && key !== 'hotShare' && !key.endsWith('Us') && !key.endsWith('Ms') ? integer(0) : number;
    cmd.addOption(new Option(`--${kebab(key)} <n>`, help).argParser(parse).default(def));
  }
  return cmd.action(async (o: SimOptions & Partial<DaemonLoopParams>, command: Command) => {
    applyQuick(o, command, { np: [4, 8, 16], durationMs: 8, warmupMs: 3, collapseAtMs: 3 } as Partial<SimOptions & DaemonLoopParams>);
    const base = { ...DEFAULT_PARAMS };
    for (const key of Object.keys(PARAM_HELP) as (keyof DaemonLoopParams)[]) (base as Record<string, unknown>)[key] = o[key];
    for (const np of o.np) {
      const bad = checkParams({ ...base, np });
      if (bad) throw new Error(`weft sim daemon-loop: ${bad}`);
    }
    if (o.recovery && !(o.collapseForMs > 0)) throw new Error('weft sim daemon-loop: --collapse-for-ms must be > 0 (or --no-recovery)');
    // The recovery runs go on 8 ms past the restart, whatever --duration-ms says.
    const recoveryMs = Math.max(base.durationMs, o.collapseAtMs + o.collapseForMs + base.startSpreadUs / 1000 + 8);
    const jobs = o.np.flatMap((np) => o.controllers.map((controller) => ({ params: { ...base, np }, controller })));
    const recoveryJobs = o.recovery
      ? o.np.flatMap((np) => o.controllers.map((controller) => ({ params: { ...base, np, startBurst: base.clients * base.qd, durationMs: recoveryMs, collapseAtMs: o.collapseAtMs, collapseForMs: o.collapseForMs }, controller })))
      : [];
    const all = [...jobs, ...recoveryJobs];
    const t0 = performance.now();
    const progress = process.stderr.isTTY && !o.json ? (d: number, n: number) => process.stderr.write(`\r  ${d}/${n} runs`) : undefined;
    const results = await runJobs(all, o.threads, progress);
    if (progress) process.stderr.write('\r\x1b[K');
    const wallS = (performance.now() - t0) / 1000;
    const main: SimResult[] = results.slice(0, jobs.length);
    const recovery: SimResult[] = results.slice(jobs.length);
    const rows = toRows(main, recovery);
    const meta = { params: base, t_item_us: itemUs(base), critical_batch: base.rttUs / itemUs(base), wall_s: wallS, runs: all.length };
    const dir = resultsDir();
    mkdirSync(dir, { recursive: true });
    const jsonFile = path.join(dir, 'sim-daemon-loop.json');
    const payload = JSON.stringify({ meta, rows, series: main.map((r) => ({ np: r.np, controller: r.controller, ...r.series })), recovery: recovery.map((r) => ({ np: r.np, controller: r.controller, ...r.series })) });
    writeFileSync(jsonFile, payload);
    if (o.out) writeFileSync(o.out, JSON.stringify(rows, null, 2));
    if (o.json) console.log(JSON.stringify(rows, null, 2));
    else {
      console.log(`weft sim daemon-loop: ${all.length} runs of ${base.durationMs} ms simulated in ${wallS.toFixed(1)} s (T_item ${itemUs(base).toFixed(2)} us, critical batch T_rtt/T_item ${(base.rttUs / itemUs(base)).toFixed(0)})`);
      console.log(formatTable(rows, o.recovery));
      console.log(`\nrows and series: ${jsonFile}`);
    }
    if (o.plots) {
      try {
        const files = await plotSim(main, recovery, rows, o.seriesNp, base.seriesMs * 1000, dir);
        if (!o.json) console.log(`plots: ${files.join(', ')}`);
      } catch (err) {
        const e = err as NodeJS.ErrnoException;
        if (e.code === 'ERR_MODULE_NOT_FOUND') console.error('plots skipped: vega and vega-lite are development dependencies (npm install in a checkout)');
        else throw err;
      }
    }
  });
}

runIfMain(import.meta.url, () => daemonLoopCommand().name('weft sim daemon-loop'));

/**
 * `weft run`: starts N ranks of a script on this host with the rank environment set, hosts a
 * TcpStore for them unless told to use another store, prefixes their output with the rank,
 * forwards SIGINT/SIGTERM, and stops the whole job when one rank fails.
 *
 * Several hosts: run `weft run -n N --nnodes K --node-rank R` on each of the K hosts
 * (R = 0..K-1) with either `--store URL` (Redis or any store every host reaches) or
 * `--master-addr A --master-port P` (node 0's launcher hosts a TcpStore on A:P, which must be
 * an address the other hosts reach; it requires the job's secret from WEFT_STORE_SECRET(_FILE)
 * on every host: a store on a network interface must not be open to anyone on the network).
 * Hosts may run different numbers of ranks: the launchers publish their counts in the store
 * and host R's ranks come after those of hosts 0..R-1.
 *
 * Secrets travel in the environment, never on a command line: the TcpStore the launcher hosts
 * gets a fresh random secret per job, passed to the ranks in WEFT_STORE_SECRET; a store given
 * with `store` reaches the ranks in WEFT_STORE, its credentials in whatever the launcher's own
 * environment holds (WEFT_STORE_SECRET(_FILE), WEFT_STORE_PASSWORD(_FILE)).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createInterface } from 'node:readline';
import path from 'node:path';
import { statSync } from 'node:fs';
import { constants } from 'node:os';
import { WeftError } from '../errors.js';
import { native } from '../native/binding.js';
import { parseProvider, sweepProcessSegments } from '../nic/index.js';
import { TcpStoreServer } from '../rendezvous/stores/tcp/server.js';
import { credentialFromEnv } from '../rendezvous/stores/shared/secrets.js';
import { PrefixClaim } from './prefix-claim.js';
import { checkJobPrefix } from '../rendezvous/prefix-store.js';

export interface LaunchOptions {
  /** Ranks on this host. */
  ranks: number;
  script: string;
  args: string[];
  /**
   * Store URL; default: a TcpStore hosted by the launcher on 127.0.0.1, with a random
   * per-job secret the ranks get in WEFT_STORE_SECRET. The ranks get the URL in WEFT_STORE
   * (their environment, not their command line).
   */
  store?: string;
  /** Job namespace in the store (default: a fresh random id). */
  prefix?: string;
  nnodes?: number;
  nodeRank?: number;
  /**
   * Several hosts without a store: node 0's launcher hosts a TcpStore on this address (one
   * the other hosts reach) and `masterPort` (default 29500); every launcher needs the job's
   * secret in WEFT_STORE_SECRET or WEFT_STORE_SECRET_FILE.
   */
  masterAddr?: string;
  masterPort?: number;
  /** WEFT_IFACE for the ranks: the interface their fabric endpoints bind (docs/hosts.md). */
  iface?: string;
  /** How long launchers wait for each other's rank counts (default 300000 ms). */
  joinTimeoutMs?: number;
  /** WEFT_PROVIDER for the ranks. */
  provider?: string;
  /** Colour the rank prefixes (default: when stdout is a TTY and NO_COLOR is unset). */
  color?: boolean;
  /** How long ranks get to exit after SIGTERM before SIGKILL (default 3000 ms). */
  graceMs?: number;
  /**
   * After a rank fails, how long the others get to see it and exit with their own error
   * before they are sent SIGTERM (default 1000 ms).
   */
  failGraceMs?: number;
  /** Where output lines go (default process.stdout / process.stderr). */
  out?: NodeJS.WritableStream;
  err?: NodeJS.WritableStream;
  /** @internal How ranks are started (tests stand in a spawn that fails). */
  spawnRank?: typeof spawn;
}

const COLORS = [36, 33, 35, 32, 34, 31, 96, 93, 95, 92, 94, 91];

/** Runs the job; resolves with the launcher's exit code (0 when every rank exited 0). */
export async function launch(o: LaunchOptions): Promise<number> {
  const nnodes = o.nnodes ?? 1;
  const nodeRank = o.nodeRank ?? 0;
  if (!Number.isInteger(o.ranks) || o.ranks < 1) throw new WeftError('EINVAL', `weft run: -n must be a positive integer, got ${o.ranks}`);
  if (!Number.isInteger(nnodes) || nnodes < 1 || !Number.isInteger(nodeRank) || nodeRank < 0 || nodeRank >= nnodes) throw new WeftError('EINVAL', `weft run: --node-rank ${nodeRank} must be in [0, --nnodes ${nnodes})`);
  if (nnodes > 1 && !o.store && !o.masterAddr) throw new WeftError('EINVAL', 'weft run: a multi-host job (--nnodes > 1) needs a store every host reaches: --store redis://… (or any store URL), or --master-addr ADDR --master-port PORT (node 0 hosts a TcpStore there)');
  if (o.masterAddr && o.store) throw new WeftError('EINVAL', 'weft run: give --store or --master-addr, not both');
  // Checked here, once: a bad provider or script would otherwise fail in every rank, N stacks.
  checkProvider(o.provider);
  checkScript(o.script);
  const out = o.out ?? process.stdout;
  const err = o.err ?? process.stderr;
  const color = o.color ?? (Boolean((out as NodeJS.WriteStream).isTTY) && !process.env.NO_COLOR);
  // The store we host authenticates its clients with a secret made for this job; the ranks
  // get it in their environment (readable only by their user and root), never in argv.
  let secret: string | undefined;
  let server: TcpStoreServer | undefined;
  let store: string;
  if (o.masterAddr) {
    // A store on an address other hosts reach: only with a secret every launcher was given.
    const given = credentialFromEnv('WEFT_STORE_SECRET', 'weft run')?.value;
    if (!given) throw new WeftError('EINVAL', `weft run: --master-addr ${o.masterAddr} makes node 0 host a TcpStore that other hosts reach, so it needs a secret: set WEFT_STORE_SECRET (or WEFT_STORE_SECRET_FILE) to the same random value on every host, e.g. from \`openssl rand -hex 32\``);
    const port = o.masterPort ?? 29500;
    const host = o.masterAddr.includes(':') ? `[${o.masterAddr}]` : o.masterAddr;
    if (nodeRank === 0) server = await TcpStoreServer.listen({ host: o.masterAddr, port, secret: given, log: (m) => err.write(`weft run: store: ${m}\n`) });
    store = `tcp://${host}:${port}`;
  } else if (o.store) {
    store = o.store;
  } else {
    secret = randomBytes(32).toString('hex');
    server = await TcpStoreServer.listen({ host: '127.0.0.1', port: 0, secret, log: (m) => err.write(`weft run: store: ${m}\n`) });
    store = server.url;
  }
  const storeEnv: NodeJS.ProcessEnv = { WEFT_STORE: store };
  if (secret) storeEnv.WEFT_STORE_SECRET = secret;
  // Launchers on several hosts must name the same job: the default is one fixed name (the
  // prefix claim refuses a second job that uses it at the same time).
  const prefix = o.prefix ?? (nnodes > 1 ? 'weft-job' : `job-${Date.now().toString(36)}-${randomBytes(3).toString('hex')}`);
  checkJobPrefix('weft run --prefix', prefix);
  // A shared store: no other job may use this prefix while this one runs (the store we host
  // for this host alone holds this job alone).
  const shared = o.store !== undefined || o.masterAddr !== undefined;
  let claim: PrefixClaim | undefined;
  let firstRank = nodeRank * o.ranks;
  let world = nnodes * o.ranks;
  // Ctrl-C while waiting for the other hosts' launchers: release the claim (a launcher killed
  // by the signal's default action left it, and its host's next job had to take it over).
  const joining = new AbortController();
  let joinSignal: NodeJS.Signals | undefined;
  const abortJoin = (sig: NodeJS.Signals) => {
    joinSignal ??= sig;
    joining.abort(new WeftError('EABORTED', `weft run: interrupted by ${sig} while joining the other hosts; released this host's claim on prefix '${prefix}'`));
  };
  process.on('SIGINT', abortJoin);
  process.on('SIGTERM', abortJoin);
  try {
    claim = shared ? await PrefixClaim.take(store, prefix, nodeRank, o.masterAddr && nodeRank > 0 ? (o.joinTimeoutMs ?? 300_000) : 10_000, joining.signal, nnodes) : undefined;
    if (claim && nnodes > 1) ({ firstRank, world } = await claim.join({ nnodes, nodeRank, ranks: o.ranks, script: o.script, args: o.args, timeoutMs: o.joinTimeoutMs ?? 300_000, signal: joining.signal }));
    joining.signal.throwIfAborted();
  } catch (e) {
    await claim?.release(false);
    await server?.close();
    if (!joinSignal) throw e;
    // Interrupted: as after Ctrl-C in a running job, one line and 128 + the signal's number.
    err.write(`${(joining.signal.reason as Error).message}\n`);
    return 128 + (constants.signals[joinSignal] ?? 2);
  } finally {
    process.off('SIGINT', abortJoin);
    process.off('SIGTERM', abortJoin);
  }
  const command = scriptCommand(o.script);

  const children: ChildProcess[] = [];
  const exits: ({ code: number | null; signal: NodeJS.Signals | null } | undefined)[] = new Array(o.ranks).fill(undefined);
  let failure: string | undefined;
  /**
   * A failed rank whose stderr named EPEERDEAD died of another rank's death: the summary names
   * it only when no rank failed of its own accord within the grace (it may exit first: the
   * dead rank unlinks its memory before its process is gone).
   */
  let consequence: string | undefined;
  const peerDead: boolean[] = [];
  let stopping = false;
  let killTimer: NodeJS.Timeout | undefined;

  /** ' (rank 2, pid 123, is stopped: SIGSTOP or a debugger)': the rank the others timed out waiting for. */
  const stoppedRanks = () => {
    const stopped = children.flatMap((c, local) => (c.pid && c.exitCode === null && native.processState(c.pid) === 'T' ? [`rank ${firstRank + local}, pid ${c.pid}`] : []));
    return stopped.length ? ` (${stopped.join('; ')}: stopped by SIGSTOP or a debugger, which the others waited for)` : '';
  };
  const running = () => children.filter((c) => c.exitCode === null && c.signalCode === null);
  const stopAll = (signal: NodeJS.Signals) => {
    if (stopping) return;
    stopping = true;
    clearTimeout(graceTimer);
    for (const c of running()) {
      c.kill(signal);
      // A stopped rank takes no signal but SIGKILL until it runs again.
      if (c.pid && native.processState(c.pid) === 'T') c.kill('SIGCONT');
    }
    killTimer = setTimeout(() => {
      for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    }, o.graceMs ?? 3000);
    killTimer.unref();
  };
  // After one rank fails, the others get a moment to see it (weft fails their calls within
  // ~0.2 s, naming the failed rank) and exit with their own error before they are stopped:
  // stopped at once, they died of SIGTERM and the job's log said nothing of the cause.
  let graceTimer: NodeJS.Timeout | undefined;
  const rankFailed = () => {
    if (stopping || graceTimer) return;
    graceTimer = setTimeout(() => stopAll('SIGTERM'), o.failGraceMs ?? 1000);
    graceTimer.unref();
  };
  let interrupted: NodeJS.Signals | undefined;
  const onSignal = (sig: NodeJS.Signals) => {
    interrupted ??= sig;
    failure ??= `interrupted by ${sig}`;
    stopAll(sig);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  const done = new Promise<void>((resolve) => {
    let remaining = o.ranks;
    for (let local = 0; local < o.ranks; local++) {
      const rank = firstRank + local;
      const env: NodeJS.ProcessEnv = {
        ...process.env,
        ...storeEnv,
        WEFT_RANK: String(rank),
        WEFT_WORLD_SIZE: String(world),
        WEFT_LOCAL_RANK: String(local),
        WEFT_LOCAL_WORLD_SIZE: String(o.ranks),
        WEFT_PREFIX: prefix,
        WEFT_LAUNCHER_PID: String(process.pid),
        WEFT_LAUNCHER_START: String(native.processStartTime(process.pid)),
        ...(o.provider ? { WEFT_PROVIDER: o.provider } : {}),
        ...(o.iface ? { WEFT_IFACE: o.iface } : {}),
        ...(color ? { FORCE_COLOR: process.env.FORCE_COLOR ?? '1' } : {}),
      };
      // Our secret wins over one the launcher inherited, also one in a file.
      if (secret) delete env.WEFT_STORE_SECRET_FILE;
      const child = (o.spawnRank ?? spawn)(command[0], [...command.slice(1), ...o.args], { env, stdio: ['inherit', 'pipe', 'pipe'] });
      children.push(child);
      // Each rank is counted out once: by its exit, or by an error that means it never ran
      // (a spawn that fails with EAGAIN emits 'error' and no 'exit': the job would wait for ever).
      let countedOut = false;
      const countOut = () => {
        if (countedOut) return;
        countedOut = true;
        if (--remaining === 0) resolve();
      };
      const tag = color ? `\x1b[${COLORS[rank % COLORS.length]}m[rank ${rank}]\x1b[0m ` : `[rank ${rank}] `;
      if (child.stdout) createInterface({ input: child.stdout }).on('line', (l) => out.write(tag + l + '\n'));
      if (child.stderr) {
        createInterface({ input: child.stderr }).on('line', (l) => {
          if (!peerDead[local] && l.includes('EPEERDEAD')) peerDead[local] = true;
          err.write(tag + l + '\n');
        });
      }
      child.on('error', (e) => {
        failure ??= `rank ${rank} could not start: ${e.message}`;
        stopAll('SIGTERM');
        if (child.pid === undefined) {
          exits[local] = { code: null, signal: null };
          countOut();
        }
      });
      child.on('exit', (code, signal) => {
        exits[local] = { code, signal };
        // A rank that was killed cannot remove its shared memory; its launcher can (a rank
        // that exited cleanly left nothing: the sweep then finds nothing of its pid).
        if (child.pid) sweepProcessSegments(child.pid);
        const judge = () => {
          if ((code !== 0 || signal) && !stopping && !interrupted) {
            const what = `rank ${rank} ${signal ? `was killed by ${signal}` : `exited with status ${code}`}${stoppedRanks()}`;
            if (peerDead[local]) consequence ??= what;
            else failure ??= what;
            rankFailed();
          }
          countOut();
        };
        if (code === 0 && !signal) judge();
        else {
          // A failed rank is judged once its last stderr lines are read (they say whether it
          // died of a peer's death), 100 ms at most. One killed by SIGINT waits the 100 ms:
          // Ctrl-C signals the whole process group, so a rank may die of it before our own
          // handler runs, and the job must read as interrupted (130), not as a failed rank.
          let judged = false;
          const judgeOnce = () => {
            if (judged) return;
            judged = true;
            clearTimeout(timer);
            judge();
          };
          const timer = setTimeout(judgeOnce, 100);
          if (signal !== 'SIGINT' || stopping) {
            if (!child.stderr || child.stderr.readableEnded) judgeOnce();
            else child.stderr.once('end', judgeOnce);
          }
        }
      });
    }
  });
  await done;
  failure ??= consequence;
  clearTimeout(graceTimer);
  if (killTimer) clearTimeout(killTimer);
  process.off('SIGINT', onSignal);
  process.off('SIGTERM', onSignal);
  // Hosting the store of ranks on other hosts: they may still be saying goodbye.
  if (server && nnodes > 1) {
    const until = performance.now() + 10_000;
    while (server.connections > 1 && performance.now() < until) await new Promise((r) => setTimeout(r, 50));
  }
  await server?.close();
  // After a failure the ranks could not remove the job's keys; the launcher does (a clean
  // job's last rank did). Of a job on several hosts, other hosts' ranks may still be using
  // them: the next job on the prefix deletes them once all its launchers have joined.
  await claim?.release(failure !== undefined && nnodes === 1);
  if (failure) {
    const clean = exits.filter((e) => e && e.code === 0 && !e.signal).length;
    err.write(`weft run: ${failure}; stopped the job (${clean} of ${o.ranks} local ranks had finished cleanly)\n`);
    // Ctrl-C: 130, as shells and other launchers report an interrupted command.
    if (interrupted) return 128 + (constants.signals[interrupted] ?? 2);
    const first = exits.find((e) => e && e.code !== 0 && e.code !== null);
    return first?.code ?? 1;
  }
  return 0;
}

/**
 * The one-line warning for a store URL given on weft run's command line that carries a
 * password (every local user reads command lines with `ps`), or undefined.
 */
export function passwordWarning(url: string): string | undefined {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return undefined; // not a URL: openStore will say so
  }
  if (!u.password) return undefined;
  return 'weft run: warning: the --store URL carries a password, which every user of this host can read in `ps` while the job runs; give the URL in WEFT_STORE instead, and the password in WEFT_STORE_PASSWORD or WEFT_STORE_PASSWORD_FILE (a file of mode 0600)';
}

function checkProvider(provider: string | undefined): void {
  if (provider === undefined || provider === 'auto') return;
  let kind: string;
  try {
    kind = parseProvider(provider).kind;
  } catch (e) {
    throw new WeftError('EINVAL', `weft run: --provider: ${(e as Error).message}, or leave it unset (shared memory inside a host, the fabric between hosts)`);
  }
  if (kind === 'ofi' && !native.ofi.available) throw new WeftError('ENOTSUP', `weft run: --provider ${provider} needs libfabric: ${native.ofi.reason ?? 'not available'}`);
}

function checkScript(script: string): void {
  let isFile = false;
  try {
    isFile = statSync(script).isFile();
  } catch {
    throw new WeftError('EINVAL', `weft run: script ${script} not found (looked from ${process.cwd()})`);
  }
  if (!isFile) throw new WeftError('EINVAL', `weft run: ${script} is not a file; give the script each rank runs (.js, .mjs, .cjs or .ts)`);
}

/** node for .js/.mjs/.cjs; node with the tsx loader for .ts/.mts/.cts (.ts and .tsx as ESM). */
function scriptCommand(script: string): string[] {
  const ext = path.extname(script);
  const tsx = ['--import', import.meta.resolve('tsx')];
  // .ts ranks run as ES modules whatever the project's package type (top-level await works).
  if (ext === '.ts' || ext === '.tsx') return [process.execPath, ...tsx, '--import', import.meta.resolve('./ts-rank/register.js'), script];
  if (ext === '.mts' || ext === '.cts') return [process.execPath, ...tsx, script];
  return [process.execPath, script];
}

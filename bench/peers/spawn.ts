/**
 * Running a peer's processes with a deadline: each launched process leads its own process
 * group; on timeout, failure of a sibling, or this process exiting or being interrupted,
 * the group and every descendant (mpirun puts each rank in a group of its own) is killed.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';

/** Output kept per process for error messages. */
const TAIL_CHARS = 4000;

export interface Launch {
  /** Shown in errors, e.g. "gloo-bench rank 1" or "mpirun". */
  label: string;
  command: string;
  args: string[];
  env?: NodeJS.ProcessEnv;
}

export interface LaunchResult {
  label: string;
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderrTail: string;
}

export class PeerRunError extends Error {
  constructor(
    message: string,
    readonly results: LaunchResult[],
  ) {
    super(message);
    this.name = 'PeerRunError';
  }
}

/** Pids of every descendant of `pid` (Linux /proc), deepest last. */
function descendants(pid: number): number[] {
  const children = new Map<number, number[]>();
  let entries: string[] = [];
  try {
    entries = readdirSync('/proc');
  } catch {
    return [];
  }
  for (const name of entries) {
    if (!/^\d+$/.test(name)) continue;
    try {
      // pid (comm) state ppid ...: comm may hold spaces and parentheses; ppid follows the last ')'.
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      const list = children.get(ppid) ?? [];
      list.push(Number(name));
      children.set(ppid, list);
    } catch {
      // gone meanwhile
    }
  }
  const out: number[] = [];
  const walk = (p: number) => {
    for (const c of children.get(p) ?? []) {
      out.push(c);
      walk(c);
    }
  };
  walk(pid);
  return out;
}

function signal(target: number, sig: NodeJS.Signals): void {
  try {
    process.kill(target, sig);
  } catch {
    // already gone
  }
}

/** SIGKILLs the group led by `pid`, and every descendant with its own group. */
function killTree(pid: number): void {
  const below = descendants(pid);
  signal(-pid, 'SIGKILL');
  signal(pid, 'SIGKILL');
  for (const d of below) {
    signal(-d, 'SIGKILL');
    signal(d, 'SIGKILL');
  }
}

// Live process-group leaders, killed if this process exits or is interrupted mid-run, and
// clean-ups (temporary directories) that a `finally` would not reach then.
const live = new Set<number>();
const cleanups = new Set<() => void>();
let hooked = false;

/** Runs `fn` if this process exits or is interrupted before the returned function is called. */
export function onAbandon(fn: () => void): () => void {
  cleanups.add(fn);
  return () => cleanups.delete(fn);
}

function abandon(): void {
  for (const pid of live) killTree(pid);
  live.clear();
  for (const fn of cleanups) {
    try {
      fn();
    } catch {
      // best effort on the way out
    }
  }
  cleanups.clear();
}

function onSignal(sig: NodeJS.Signals): void {
  abandon();
  process.removeListener('SIGINT', onSignal);
  process.removeListener('SIGTERM', onSignal);
  hooked = false;
  process.kill(process.pid, sig);
}
function track(pid: number): void {
  live.add(pid);
  if (!hooked) {
    hooked = true;
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
  }
}
function untrack(pid: number): void {
  live.delete(pid);
  if (live.size === 0 && hooked) {
    hooked = false;
    process.removeListener('SIGINT', onSignal);
    process.removeListener('SIGTERM', onSignal);
  }
}
process.on('exit', abandon);

export interface RunAllOptions {
  /** Prefix of error messages, e.g. "gloo np=2". */
  name: string;
  timeoutMs: number;
  /**
   * Before the SIGKILL of a timeout, SIGTERM the leaders and wait this long (mpirun then
   * stops its ranks and removes its shared-memory files). 0: SIGKILL at once.
   */
  termGraceMs?: number;
}

/**
 * Starts every launch at once and resolves when all exit with code 0. Rejects with a
 * PeerRunError (exit codes and stderr tails) when one fails, which kills the others, or when
 * the timeout passes, which kills them all.
 */
export function runAll(launches: Launch[], opts: RunAllOptions): Promise<LaunchResult[]> {
  return new Promise((resolve, reject) => {
    const results: LaunchResult[] = launches.map((l) => ({ label: l.label, code: null, signal: null, stdout: '', stderrTail: '' }));
    const children: ChildProcess[] = [];
    let pending = launches.length;
    let failure: string | undefined;
    let settled = false;

    const killAll = (graceMs: number) => {
      const leaders = children.map((c) => c.pid).filter((p): p is number => p !== undefined && live.has(p));
      if (graceMs <= 0) {
        for (const pid of leaders) killTree(pid);
        return;
      }
      // Remember the trees now: once a leader dies its children are reparented and lost.
      const trees = leaders.map((pid) => [pid, ...descendants(pid)]);
      for (const pid of leaders) signal(pid, 'SIGTERM');
      setTimeout(() => {
        for (const tree of trees) for (const pid of tree) (signal(-pid, 'SIGKILL'), signal(pid, 'SIGKILL'));
      }, graceMs).unref();
    };
    const finish = () => {
      if (settled || pending > 0) return;
      settled = true;
      clearTimeout(timer);
      if (failure) reject(new PeerRunError(`${opts.name}: ${failure}\n  command: ${[launches[0].command, ...launches[0].args].join(' ')}\n${describe(results)}`, results));
      else resolve(results);
    };
    const timer = setTimeout(() => {
      if (!failure) failure = `timed out after ${opts.timeoutMs} ms`;
      killAll(opts.termGraceMs ?? 0);
    }, opts.timeoutMs);

    launches.forEach((l, i) => {
      const child = spawn(l.command, l.args, { env: l.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
      children.push(child);
      if (child.pid !== undefined) track(child.pid);
      const r = results[i];
      collect(child, r);
      let done = false;
      const exited = () => {
        if (done) return;
        done = true;
        if (child.pid !== undefined) untrack(child.pid);
        pending--;
        finish();
      };
      child.on('error', (err) => {
        if (!failure) failure = `${l.label}: cannot start ${l.command}: ${err.message}`;
        r.code = -1;
        killAll(0);
        exited();
      });
      child.on('close', (code, sig) => {
        r.code = code;
        r.signal = sig;
        if (code !== 0 && !failure) {
          failure = `${l.label} ${sig ? `was killed by ${sig}` : `exited with code ${code}`}`;
          killAll(0);
        }
        exited();
      });
    });
  });
}

/** Exit status and stderr tail of each process, for error messages. */
export function describe(results: LaunchResult[]): string {
  return results
    .map((r) => {
      const status = r.signal ? `killed by ${r.signal}` : r.code === null ? 'still running' : `exit ${r.code}`;
      const tail = r.stderrTail.trim().split('\n').slice(-15).join('\n    ');
      return `  ${r.label} (${status})${tail ? `, stderr:\n    ${tail}` : ', no stderr'}`;
    })
    .join('\n');
}

/**
 * Waits for one child already started in a process group of its own (detached, as
 * EmulatedHosts.spawn starts them); kills the group at the timeout. For processes started
 * elsewhere than runAll (inside an emulated host's namespaces).
 */
export function finished(child: ChildProcess, label: string, timeoutMs: number): Promise<LaunchResult> {
  const r: LaunchResult = { label, code: null, signal: null, stdout: '', stderrTail: '' };
  collect(child, r);
  // Tracked as runAll's are: killed with its tree if this process exits or is interrupted.
  const pid = child.pid;
  if (pid !== undefined) track(pid);
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      if (pid !== undefined) killTree(pid);
    }, timeoutMs);
    const done = () => {
      clearTimeout(timer);
      if (pid !== undefined) untrack(pid);
      resolve(r);
    };
    // A child that could not start: 'error' and no 'close'.
    child.on('error', (err) => {
      r.code = -1;
      r.stderrTail += `cannot start: ${err.message}`;
      done();
    });
    // 'close', not 'exit': the child's output is read to its end first.
    child.on('close', (code, sig) => {
      r.code = code;
      r.signal = sig;
      done();
    });
  });
}

/** Gathers a child's stdout and the tail of its stderr into `r` (as text: no character split between chunks). */
function collect(child: ChildProcess, r: LaunchResult): void {
  child.stdout?.setEncoding('utf8').on('data', (d: string) => (r.stdout += d));
  child.stderr?.setEncoding('utf8').on('data', (d: string) => {
    r.stderrTail = (r.stderrTail + d).slice(-TAIL_CHARS);
  });
}

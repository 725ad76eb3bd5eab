/**
 * Emulated hosts on one machine, for tests and benchmarks of jobs that span hosts: one
 * network namespace per host, all joined to a bridge in a "switch" namespace by veth pairs,
 * with link-local addresses (169.254.S.1, .2, ...; S differs per harness so concurrent ones
 * never meet). Every process started on a host also gets its own hostname (UTS namespace)
 * and the host's own /dev/shm (a directory of the machine's /dev/shm, bind-mounted in its own
 * mount namespace), so weft sees distinct hosts: distinct host ids, no shared memory across
 * them, only the network. A host's /dev/shm lasts as long as the harness, as a real host's
 * does: a second job on a host sees what the first left, and the host id stays the same (a
 * tmpfs per process gave every job a host id of its own, so a launcher could never recognise
 * its host's dead predecessor).
 *
 * Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN), `ip` (iproute2) and `unshare` (util-linux).
 * `EmulatedHosts.unavailable()` says why not, for a test to skip with one line.
 *
 * Nothing leaks: `destroy()` kills every process it started (process groups), then deletes the
 * namespaces (which removes the veths and the bridge) and the hosts' /dev/shm directories; a
 * harness whose creator died is swept by the next one (names carry the creator's pid).
 *
 * @example
 * const hosts = await EmulatedHosts.create(2);
 * const p = hosts.spawn(0, process.execPath, ['app.js']);   // runs on host 0 as `weft-h0`
 * await hosts.destroy();
 */
import { spawn, spawnSync, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import path from 'node:path';
import { parseCpuList } from '../src/host/placement.js';

const PREFIX = 'weftns';
/** The machine's /dev/shm, where each host's own /dev/shm is a directory. */
const SHM = '/dev/shm';

/** One emulated host. */
export interface EmulatedHost {
  /** Its index, hostname (`weft-h<i>`), namespace and address. */
  index: number;
  hostname: string;
  netns: string;
  address: string;
  /** The cores its processes may run on (a `taskset -c` list), when it has cores of its own. */
  cpus?: string;
  /** How many cores that list holds. */
  cpuCount?: number;
}

/** Options of `EmulatedHosts.create`. */
export interface EmulatedHostsOptions {
  /**
   * Give each host cores of its own, as real hosts have: the cores this process may run on
   * (its affinity, which a cpuset may narrow) split into H equal runs, one per host, or one
   * core each in turn when there are more hosts than cores. Every process started on a
   * host (and everything it starts, such as an rsh agent's daemons) inherits that affinity.
   * Without it the hosts' processes share every core, and two ranks of different hosts can
   * take turns on one core where real hosts would run them side by side. Default false.
   */
  ownCores?: boolean;
}

/**
 * The cores of host `i` of `count`, from the cores this process may use (`cores`, in order; see
 * EmulatedHostsOptions.ownCores).
 */
export function hostCpus(i: number, count: number, cores: readonly number[]): number[] {
  const n = cores.length;
  if (count >= n) return [cores[i % n]];
  return cores.slice(Math.floor((i * n) / count), Math.floor(((i + 1) * n) / count));
}

/** The cores of a kernel CPU list ("0-3,8"), or of a process's status text (its Cpus_allowed_list). */
export function cpuList(text: string): number[] {
  const list = /Cpus_allowed_list:\s*(\S+)/.exec(text)?.[1] ?? text.trim();
  return parseCpuList(list) ?? [];
}

/** The cores this process may run on, else 0 .. availableParallelism() - 1. */
function allowedCpus(): number[] {
  const out = cpuList(readFileSync('/proc/self/status', 'utf8'));
  return out.length > 0 && out.every(Number.isInteger) ? out : [...Array(availableParallelism()).keys()];
}

function run(args: string[]): { ok: boolean; text: string } {
  const r = spawnSync(args[0], args.slice(1), { encoding: 'utf8' });
  return { ok: r.status === 0, text: `${r.stdout ?? ''}${r.stderr ?? ''}`.trim() };
}

function must(args: string[]): void {
  const r = run(args);
  if (!r.ok) throw new Error(`emulated hosts: \`${args.join(' ')}\` failed: ${r.text}`);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Deletes namespaces left by harnesses whose process is gone. */
function sweepStale(): void {
  const r = run(['ip', 'netns', 'list']);
  if (!r.ok) return;
  for (const line of r.text.split('\n')) {
    const name = line.split(' ')[0];
    const m = /^weftns-(\d+)-/.exec(name);
    if (m && !alive(Number(m[1]))) {
      killNamespaceProcesses(name);
      run(['ip', 'netns', 'del', name]);
    }
  }
  for (const name of readdirSync(SHM)) {
    const m = /^weftns-(\d+)-.*-shm$/.exec(name);
    if (m && !alive(Number(m[1]))) rmSync(path.join(SHM, name), { recursive: true, force: true });
  }
}

function killNamespaceProcesses(netns: string): void {
  const r = run(['ip', 'netns', 'pids', netns]);
  if (!r.ok) return;
  for (const p of r.text.split(/\s+/).filter(Boolean)) {
    try {
      process.kill(Number(p), 'SIGKILL');
    } catch {}
  }
}

let instances = 0;

export class EmulatedHosts {
  readonly hosts: EmulatedHost[];
  private readonly children = new Set<ChildProcess>();
  private destroyed = false;
  /** /etc/hosts of every emulated host (their names resolve to their addresses). */
  readonly hostsFile: string;
  private agent: string | undefined;

  private constructor(
    readonly id: string,
    readonly subnet: number,
    count: number,
    options: EmulatedHostsOptions,
  ) {
    const cores = options.ownCores ? allowedCpus() : [];
    this.hosts = [...Array(count).keys()].map((i) => {
      const host: EmulatedHost = { index: i, hostname: `weft-h${i}`, netns: `${id}-h${i}`, address: `169.254.${subnet}.${i + 1}` };
      if (options.ownCores) {
        const mine = hostCpus(i, count, cores);
        host.cpus = mine.join(',');
        host.cpuCount = mine.length;
      }
      return host;
    });
    this.hostsFile = path.join(tmpdir(), `${id}-hosts`);
    writeFileSync(this.hostsFile, ['127.0.0.1 localhost', ...this.hosts.map((h) => `${h.address} ${h.hostname}`), ''].join('\n'));
  }

  /** The shell lines that make a process's namespaces look like host `host` (hostname, /dev/shm, /etc/hosts, its cores). */
  private enter(host: EmulatedHost): string[] {
    const lines = [`hostname ${host.hostname}`, `mount --bind ${this.shmDir(host)} /dev/shm`, `mount --bind ${this.hostsFile} /etc/hosts`];
    if (host.cpus !== undefined) lines.push(`taskset -p -c ${host.cpus} $$ > /dev/null || { echo "weft-emulated-host: taskset -c ${host.cpus} failed" >&2; exit 1; }`);
    return lines;
  }

  /** Host `host`'s /dev/shm, a directory of the machine's. */
  shmDir(host: EmulatedHost): string {
    return path.join(SHM, `${host.netns}-shm`);
  }

  /**
   * A remote-shell program for launchers that start daemons on other hosts (Open MPI's
   * `plm_rsh_agent`): `agent <hostname> <command...>` runs the command on that emulated host.
   */
  rshAgent(): string {
    if (this.agent) return this.agent;
    const file = path.join(tmpdir(), `${this.id}-rsh`);
    const cases = this.hosts.map((h) => `  ${h.hostname}) ns=${h.netns}; setup='${this.enter(h).join('; ')}' ;;`).join('\n');
    writeFileSync(file, `#!/bin/sh\n# weft emulated hosts: rsh agent (${this.id})\nwhile [ "\${1#-}" != "$1" ]; do shift; done\nhost="$1"; shift\ncase "$host" in\n${cases}\n  *) echo "no emulated host $host" >&2; exit 255 ;;\nesac\nexec ip netns exec "$ns" unshare --uts --mount --propagation private sh -c "$setup; eval \\"\\$*\\"" sh "$@"\n`);
    chmodSync(file, 0o755);
    this.agent = file;
    return file;
  }

  /** Why emulated hosts cannot be made here, or undefined when they can. */
  static unavailable(): string | undefined {
    if (process.platform !== 'linux') return 'emulated hosts need Linux network namespaces';
    if (typeof process.getuid === 'function' && process.getuid() !== 0) return 'emulated hosts need root (network and mount namespaces); CI runs as root';
    if (!run(['ip', '-V']).ok) return 'emulated hosts need `ip` from iproute2 (apt-get install iproute2)';
    if (!run(['unshare', '--version']).ok) return 'emulated hosts need `unshare` from util-linux';
    if (!existsSync('/dev/shm')) return 'emulated hosts need /dev/shm';
    return undefined;
  }

  /** Makes `count` hosts on one link. Throws when `unavailable()` says why. */
  static async create(count: number, options: EmulatedHostsOptions = {}): Promise<EmulatedHosts> {
    const why = EmulatedHosts.unavailable() ?? (options.ownCores && !run(['taskset', '--version']).ok ? 'emulated hosts with cores of their own need `taskset` from util-linux' : undefined);
    if (why) throw new Error(why);
    sweepStale();
    const n = instances++;
    const id = `${PREFIX}-${process.pid}-${n}`;
    const subnet = 1 + ((process.pid * 7 + n * 13) % 250);
    const h = new EmulatedHosts(id, subnet, count, options);
    try {
      const sw = `${id}-sw`;
      must(['ip', 'netns', 'add', sw]);
      must(['ip', '-n', sw, 'link', 'add', 'br0', 'type', 'bridge']);
      must(['ip', '-n', sw, 'link', 'set', 'br0', 'up']);
      for (const host of h.hosts) {
        mkdirSync(h.shmDir(host), { mode: 0o1777 });
        chmodSync(h.shmDir(host), 0o1777); // mkdir's mode passes through the umask
        must(['ip', 'netns', 'add', host.netns]);
        must(['ip', '-n', host.netns, 'link', 'set', 'lo', 'up']);
        must(['ip', 'link', 'add', 'eth0', 'netns', host.netns, 'type', 'veth', 'peer', 'name', `p${host.index}`, 'netns', sw]);
        must(['ip', '-n', sw, 'link', 'set', `p${host.index}`, 'master', 'br0']);
        must(['ip', '-n', sw, 'link', 'set', `p${host.index}`, 'up']);
        must(['ip', '-n', host.netns, 'addr', 'add', `${host.address}/16`, 'dev', 'eth0']);
        must(['ip', '-n', host.netns, 'link', 'set', 'eth0', 'up']);
      }
    } catch (err) {
      await h.destroy();
      throw err;
    }
    return h;
  }

  /** Every namespace of this harness (the hosts' and the switch's). */
  get namespaces(): string[] {
    return [...this.hosts.map((x) => x.netns), `${this.id}-sw`];
  }

  /**
   * The argv that runs `command args` on host `i`: in its network namespace, with its own
   * hostname and a private /dev/shm. When the command exits, whatever it left in /dev/shm is
   * reported on stderr as `weft-emulated-host: leaked in /dev/shm: ...` and the exit status is
   * kept. The check lists the host's /dev/shm, which every process of the host shares (and a
   * killed job's leftovers stay until a device on that host sweeps them): with two processes at
   * once on one host, one may be named for the other's live segments.
   */
  argv(i: number, command: string, args: string[]): string[] {
    const host = this.hosts[i];
    if (!host) throw new RangeError(`emulated hosts: no host ${i} (there are ${this.hosts.length})`);
    const script = [
      'set -e',
      ...this.enter(host),
      'set +e',
      '"$@"',
      'rc=$?',
      'left=$(ls -A /dev/shm)',
      '[ -n "$left" ] && echo "weft-emulated-host: leaked in /dev/shm: $left" >&2',
      'exit $rc',
    ].join('\n');
    return ['ip', 'netns', 'exec', host.netns, 'unshare', '--uts', '--mount', '--propagation', 'private', 'sh', '-c', script, 'sh', command, ...args];
  }

  /** Starts `command args` on host `i` (in its own process group, killed by destroy()). */
  spawn(i: number, command: string, args: string[], options: SpawnOptions = {}): ChildProcess {
    if (this.destroyed) throw new Error('emulated hosts: already destroyed');
    const argv = this.argv(i, command, args);
    const child = spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'], ...options, detached: true });
    this.children.add(child);
    child.on('exit', () => this.children.delete(child));
    return child;
  }

  /** Kills every process started here and deletes the namespaces. */
  async destroy(): Promise<void> {
    if (this.destroyed) return;
    this.destroyed = true;
    for (const c of this.children) {
      try {
        process.kill(-(c.pid as number), 'SIGKILL');
      } catch {}
    }
    for (const ns of this.namespaces) killNamespaceProcesses(ns);
    await new Promise((r) => setTimeout(r, 50));
    for (const ns of this.namespaces) run(['ip', 'netns', 'del', ns]);
    for (const host of this.hosts) rmSync(this.shmDir(host), { recursive: true, force: true });
    rmSync(this.hostsFile, { force: true });
    if (this.agent) rmSync(this.agent, { force: true });
  }

  /** Namespaces and host /dev/shm directories of this harness that still exist (a leak check for tests). */
  static leftovers(): string[] {
    const mine = (n: string) => n.startsWith(`${PREFIX}-${process.pid}-`);
    const r = run(['ip', 'netns', 'list']);
    const namespaces = r.ok ? r.text.split('\n').map((l) => l.split(' ')[0]).filter(mine) : [];
    return [...namespaces, ...readdirSync(SHM).filter(mine).map((n) => path.join(SHM, n))];
  }
}

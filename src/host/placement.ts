import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';

/**
 * The cores this process could run on when it started. Read once, at load: init() pins a rank's
 * thread to one core (bindLocalRank), after which the affinity mask, and so
 * availableParallelism(), says 1, and a device created after pinning took a job of 2 ranks
 * on 2 cores for an oversubscribed one (its waits yielded instead of spinning).
 */
const CORES_AT_START = availableParallelism();

/** Longest CPU list a host record carries (rendezvous/hosts.ts); longer lists are left out. */
export const MAX_CPU_LIST = 256;

/**
 * The CPUs this process could run on when it started, in the kernel's list format ("0-3,8"),
 * read at load like CORES_AT_START; '' where /proc cannot say.
 */
const CPUS_AT_START = ((): string => {
  try {
    const list = /Cpus_allowed_list:\s*(\S+)/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? '';
    return list.length <= MAX_CPU_LIST && parseCpuList(list) !== undefined ? list : '';
  } catch {
    return '';
  }
})();

/**
 * The CPU numbers of a kernel CPU list ("0-3,8" is 0, 1, 2, 3, 8); undefined when malformed
 * (a peer's host record is checked with it).
 */
export function parseCpuList(list: string): number[] | undefined {
  if (!/^\d+(-\d+)?(,\d+(-\d+)?)*$/.test(list)) return undefined;
  const out: number[] = [];
  for (const part of list.split(',')) {
    const [a, b = a] = part.split('-').map(Number);
    if (b < a || b > 1 << 20 || out.length + b - a + 1 > 1 << 16) return undefined;
    for (let c = a; c <= b; c++) out.push(c);
  }
  return out;
}

/**
 * What a rank tells the others about its CPUs (rendezvous/hosts.ts): its list at start, or ''
 * when WEFT_CORES says how many cores the job has on this host. Ranks a launcher binds to a
 * core each (srun --cpu-bind=cores, mpirun --bind-to core) see one CPU apiece, so a host's
 * cores are the union of its ranks' lists, not any one rank's count.
 */
export function startCpuList(env: NodeJS.ProcessEnv = process.env): string {
  return env.WEFT_CORES ? '' : CPUS_AT_START;
}

/**
 * Cores this job may use on this host: WEFT_CORES when set (a host shared with other work, or
 * hosts emulated on one machine, which share its cores), else every core this process could
 * run on when it started (before pinning). More local ranks than this and waits yield instead
 * of spinning, and ranks are not pinned.
 */
export function hostCores(env: NodeJS.ProcessEnv = process.env): number {
  const n = Number(env.WEFT_CORES);
  return Number.isInteger(n) && n >= 1 ? n : CORES_AT_START;
}

/**
 * Where this process sits on its host, as launchers say it: weft run (WEFT_LOCAL_RANK,
 * WEFT_LOCAL_WORLD_SIZE), torchrun (LOCAL_RANK, LOCAL_WORLD_SIZE), Open MPI
 * (OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE), MPICH (MPI_LOCALRANKID,
 * MPI_LOCALNRANKS), Slurm (SLURM_LOCALID; SLURM_NTASKS_PER_NODE, else the first count of
 * SLURM_TASKS_PER_NODE, "2(x3),1"). NaN when no launcher said.
 */
export function localPlacement(env: NodeJS.ProcessEnv = process.env): { rank: number; size: number } {
  return {
    rank: Number(env.WEFT_LOCAL_RANK ?? env.LOCAL_RANK ?? env.OMPI_COMM_WORLD_LOCAL_RANK ?? env.MPI_LOCALRANKID ?? env.SLURM_LOCALID),
    size: Number(env.WEFT_LOCAL_WORLD_SIZE ?? env.LOCAL_WORLD_SIZE ?? env.OMPI_COMM_WORLD_LOCAL_SIZE ?? env.MPI_LOCALNRANKS ?? env.SLURM_NTASKS_PER_NODE ?? slurmTasksHere(env)),
  };
}

/** Slurm's tasks on this node: SLURM_TASKS_PER_NODE lists counts per node ("2(x3),1"); SLURM_NODEID picks ours. */
function slurmTasksHere(env: NodeJS.ProcessEnv): string | undefined {
  const list = env.SLURM_TASKS_PER_NODE;
  if (!list) return undefined;
  const node = Number(env.SLURM_NODEID ?? 0);
  let at = 0;
  for (const part of list.split(',')) {
    const m = /^(\d+)(?:\(x(\d+)\))?$/.exec(part.trim());
    if (!m) return undefined;
    at += m[2] ? Number(m[2]) : 1;
    if (node < at) return m[1];
  }
  return undefined;
}

import { availableParallelism } from 'node:os';

/**
 * The cores this process could run on when it started. Read once, at load: init() pins a rank's
 * thread to one core (bindLocalRank), after which the affinity mask, and so
 * availableParallelism(), says 1, and a device created after pinning took a job of 2 ranks
 * on 2 cores for an oversubscribed one (its waits yielded instead of spinning).
 */
const CORES_AT_START = availableParallelism();

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

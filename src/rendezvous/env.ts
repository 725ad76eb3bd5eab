/**
 * Where a rank learns who it is: explicit options, weft's own variables, or the names other
 * launchers set, so `weft run`, `mpirun -np 4 node app.js` and torchrun-style launchers all work.
 *
 * | source        | rank                    | world size              | store                                  |
 * |---------------|-------------------------|-------------------------|----------------------------------------|
 * | weft          | WEFT_RANK               | WEFT_WORLD_SIZE         | WEFT_STORE (+ WEFT_PREFIX)             |
 * | torchrun      | RANK                    | WORLD_SIZE              | tcp://MASTER_ADDR:MASTER_PORT (rank 0 hosts it) |
 * | Open MPI      | OMPI_COMM_WORLD_RANK    | OMPI_COMM_WORLD_SIZE    | WEFT_STORE, else a FileStore in /tmp keyed by the job |
 * | PMIx          | PMIX_RANK               | PMIX_SIZE, OMPI_COMM_WORLD_SIZE, SLURM_NTASKS | as Open MPI                |
 * | MPICH / PMI   | PMI_RANK                | PMI_SIZE                | as Open MPI                            |
 * | Slurm (srun)  | SLURM_PROCID            | SLURM_NTASKS            | as Open MPI; prefix SLURM_JOB_ID       |
 *
 * Without WEFT_STORE, MASTER_ADDR/MASTER_PORT (rank 0 hosts a TcpStore there) work under every
 * launcher. The FileStore fallback only serves ranks on one host: a launcher that says the job
 * spans hosts (local size below world size, SLURM_NNODES > 1) without a store is an error that
 * names what to set.
 *
 * The MPI fallback directory, `<tmpdir>/weft-store-<uid>-<job id>`, is one every rank of the
 * job on this host names without talking to the others, so anyone can predict it: FileStore
 * creates it with mode 0700 and refuses it when it already exists as someone else's, as
 * something others can write, or as a link someone else owns (EINVAL naming the path; set
 * WEFT_STORE to another store then). A torchrun-style rank 0 hosts its TcpStore with
 * WEFT_STORE_SECRET when set (every rank must have the same); without it only on loopback
 * (open to this host's users; openStore warns), never on an address other hosts reach.
 */
import { tmpdir } from 'node:os';
import path from 'node:path';
import { WeftError } from '../errors.js';
import { localPlacement } from '../host/placement.js';

export type EnvStyle = 'options' | 'weft' | 'torchrun' | 'ompi' | 'pmix' | 'pmi' | 'slurm';

export interface RankInfo {
  rank: number;
  size: number;
  /** Store URL; rank 0 hosts it when `serve` is set (torchrun's MASTER_ADDR/PORT). */
  store: string;
  serve: boolean;
  /** Job namespace inside the store. */
  prefix: string;
  style: EnvStyle;
}

function int(name: string, v: string | undefined): number {
  const n = Number(v);
  if (v === undefined || v === '' || !Number.isInteger(n) || n < 0) throw new WeftError('EINVAL', `${name}=${JSON.stringify(v)} is not a non-negative integer`);
  return n;
}

/** Reads rank, world size, store and prefix from `env` (default process.env). */
export function rankFromEnv(env: NodeJS.ProcessEnv = process.env, options: { prefixGiven?: boolean } = {}): RankInfo {
  let rank: number;
  let size: number;
  let style: EnvStyle;
  let store = env.WEFT_STORE;
  let serve = false;
  if (env.WEFT_RANK !== undefined || env.WEFT_WORLD_SIZE !== undefined) {
    rank = int('WEFT_RANK', env.WEFT_RANK);
    size = int('WEFT_WORLD_SIZE', env.WEFT_WORLD_SIZE);
    style = 'weft';
  } else if (env.RANK !== undefined && env.WORLD_SIZE !== undefined) {
    rank = int('RANK', env.RANK);
    size = int('WORLD_SIZE', env.WORLD_SIZE);
    style = 'torchrun';
    if (!store) {
      if (!env.MASTER_ADDR || !env.MASTER_PORT) throw new WeftError('EINVAL', 'RANK/WORLD_SIZE are set but MASTER_ADDR/MASTER_PORT are not (and WEFT_STORE is not set): set them as torchrun does, or set WEFT_STORE');
      store = `tcp://${env.MASTER_ADDR.includes(':') ? `[${env.MASTER_ADDR}]` : env.MASTER_ADDR}:${int('MASTER_PORT', env.MASTER_PORT)}`;
      serve = rank === 0;
    }
  } else if (env.OMPI_COMM_WORLD_RANK !== undefined) {
    rank = int('OMPI_COMM_WORLD_RANK', env.OMPI_COMM_WORLD_RANK);
    size = int('OMPI_COMM_WORLD_SIZE', env.OMPI_COMM_WORLD_SIZE);
    style = 'ompi';
  } else if (env.PMIX_RANK !== undefined) {
    rank = int('PMIX_RANK', env.PMIX_RANK);
    const from = env.PMIX_SIZE !== undefined ? 'PMIX_SIZE' : env.OMPI_COMM_WORLD_SIZE !== undefined ? 'OMPI_COMM_WORLD_SIZE' : 'SLURM_NTASKS';
    if (env[from] === undefined) throw new WeftError('EINVAL', 'PMIX_RANK is set but no world size is (PMIX_SIZE, OMPI_COMM_WORLD_SIZE, SLURM_NTASKS): set WEFT_WORLD_SIZE');
    size = int(from, env[from]);
    style = 'pmix';
  } else if (env.PMI_RANK !== undefined) {
    rank = int('PMI_RANK', env.PMI_RANK);
    size = int('PMI_SIZE', env.PMI_SIZE);
    style = 'pmi';
  } else if (env.SLURM_PROCID !== undefined) {
    rank = int('SLURM_PROCID', env.SLURM_PROCID);
    size = int('SLURM_NTASKS', env.SLURM_NTASKS);
    style = 'slurm';
  } else {
    throw new WeftError('EINVAL', 'this process does not know its rank: run it under `weft run -n N`, mpirun, srun or torchrun, or set WEFT_RANK, WEFT_WORLD_SIZE and WEFT_STORE');
  }
  // rank >= size is left to init(), which tells the job's other ranks through the store.
  if (size < 1) throw new WeftError('EINVAL', `the world size must be at least 1, got ${size}`);
  // MPI launchers and Slurm give no store: MASTER_ADDR/PORT as torchrun, else ranks on one
  // host meet in a directory named by the user and the job (FileStore makes sure it is that
  // user's alone).
  const jobId = env.WEFT_PREFIX ?? env.OMPI_MCA_ess_base_jobid ?? env.PMIX_NAMESPACE ?? env.PMI_JOBID ?? (env.SLURM_JOB_ID !== undefined ? `slurm-${env.SLURM_JOB_ID}${env.SLURM_STEP_ID !== undefined ? `.${env.SLURM_STEP_ID}` : ''}` : undefined) ?? env.TORCHELASTIC_RUN_ID ?? env.MASTER_PORT ?? 'weft';
  // torchrun with a shared store (WEFT_STORE): its run id is 'none' unless --rdzv-id is given,
  // and MASTER_PORT is no job id either, so two jobs would share one prefix and meet.
  if (style === 'torchrun' && env.WEFT_STORE && env.WEFT_PREFIX === undefined && !options.prefixGiven && (env.TORCHELASTIC_RUN_ID === undefined || env.TORCHELASTIC_RUN_ID === 'none')) {
    throw new WeftError('EINVAL', `rank ${rank}: torchrun with a shared store (WEFT_STORE) needs a job prefix no other job uses: set WEFT_PREFIX on every rank (or init({ prefix })), or give torchrun --rdzv-id (TORCHELASTIC_RUN_ID is ${env.TORCHELASTIC_RUN_ID === undefined ? 'unset' : "'none'"})`);
  }
  if (!store && style !== 'torchrun' && env.MASTER_ADDR && env.MASTER_PORT) {
    store = `tcp://${env.MASTER_ADDR.includes(':') ? `[${env.MASTER_ADDR}]` : env.MASTER_ADDR}:${int('MASTER_PORT', env.MASTER_PORT)}`;
    serve = rank === 0;
  }
  if (!store) {
    if (style === 'weft') throw new WeftError('EINVAL', 'WEFT_RANK is set but WEFT_STORE is not: set it to tcp://host:port, redis://host:port or file:///dir');
    const local = localPlacement(env).size;
    const nodes = Number(env.SLURM_NNODES ?? 1);
    if ((Number.isInteger(local) && local < size) || nodes > 1) {
      throw new WeftError('EINVAL', `rank ${rank}: the launcher says this job spans hosts (${Number.isInteger(local) ? `${local} of ${size} ranks on this host` : `SLURM_NNODES=${nodes}`}), and no store every host reaches was given: set WEFT_STORE=redis://host:port (any store all hosts reach), or MASTER_ADDR and MASTER_PORT (rank 0 then hosts a TcpStore there; set WEFT_STORE_SECRET on every rank)`);
    }
    const user = typeof process.getuid === 'function' ? `${process.getuid()}-` : '';
    store = `file://${path.join(tmpdir(), `weft-store-${user}${jobId.replace(/[^A-Za-z0-9_-]/g, '_')}`)}`;
  }
  return { rank, size, store, serve, prefix: env.WEFT_PREFIX ?? jobId, style };
}

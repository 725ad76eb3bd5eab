/**
 * Where this process sits on its host, as launchers say it: weft run (WEFT_LOCAL_RANK,
 * WEFT_LOCAL_WORLD_SIZE), torchrun (LOCAL_RANK, LOCAL_WORLD_SIZE), Open MPI
 * (OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE). NaN when no launcher said.
 */
export function localPlacement(env: NodeJS.ProcessEnv = process.env): { rank: number; size: number } {
  return {
    rank: Number(env.WEFT_LOCAL_RANK ?? env.LOCAL_RANK ?? env.OMPI_COMM_WORLD_LOCAL_RANK),
    size: Number(env.WEFT_LOCAL_WORLD_SIZE ?? env.LOCAL_WORLD_SIZE ?? env.OMPI_COMM_WORLD_LOCAL_SIZE),
  };
}

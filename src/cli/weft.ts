/** The `weft` command: info, demo, bench. */
import { Command, InvalidArgumentError } from 'commander';
import { printInfo } from './info.js';
import { runDemo } from './demo.js';

function positiveInt(v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('must be a positive integer');
  return n;
}

const program = new Command('weft').description('collective communication and RDMA-style RPC for Node.js').showHelpAfterError().enablePositionalOptions();

program
  .command('info')
  .description('weft version, available providers (libfabric and its providers), host id, shared-memory limits')
  .option('--json', 'print JSON')
  .action((o: { json?: boolean }) => printInfo(!!o.json));

program
  .command('demo')
  .description('run a few ranks on this host and show their traffic')
  .option('-n, --ranks <n>', 'number of ranks', positiveInt, 4)
  .option('--provider <p>', "provider: 'shm', 'ofi', 'ofi:tcp', 'ofi:shm'", process.env.WEFT_PROVIDER ?? 'shm')
  .option('--laps <n>', 'token-ring laps', positiveInt, 2000)
  .option('--blocks <n>', '1 MiB writes per rank', positiveInt, 256)
  .action(async (o: { ranks: number; provider: string; laps: number; blocks: number }) => {
    process.exitCode = await runDemo(o);
  });

program
  .command('run')
  .description('start N ranks of a script on this host (rank environment set, TcpStore hosted here unless --store)')
  .requiredOption('-n, --ranks <n>', 'ranks on this host', positiveInt)
  .option('--store <url>', 'store URL (redis://, rediss://, tcp://, file://); default: a TcpStore hosted by this launcher')
  .option('--prefix <p>', 'job namespace in the store (default: a fresh id)')
  .option('--nnodes <k>', 'hosts in the job (each runs weft run with its --node-rank)', positiveInt, 1)
  .option('--node-rank <r>', "this host's index in [0, nnodes)", (v: string) => Number(v), 0)
  .option('--provider <p>', 'WEFT_PROVIDER for the ranks')
  .argument('<script>', 'a .js or .ts file')
  .argument('[args...]', 'arguments for the script')
  .passThroughOptions()
  .action(async (script: string, args: string[], o: { ranks: number; store?: string; prefix?: string; nnodes: number; nodeRank: number; provider?: string }) => {
    const { launch } = await import('../launch/run.js');
    process.exitCode = await launch({ ranks: o.ranks, script, args, store: o.store, prefix: o.prefix, nnodes: o.nnodes, nodeRank: o.nodeRank, provider: o.provider });
  });

const bench = program.command('bench').description('benchmarks (each prints a table and writes JSON to bench/results/)');
bench
  .command('nic')
  .description('64 B WRITE_IMM round trip and streaming rate per provider, vs libfabric shm and memcpy')
  .option('--provider <list>', 'comma-separated providers (default: shm, ofi:shm, ofi:tcp when built)')
  .option('--runs <n>', 'runs per measurement; the median is reported', positiveInt, 5)
  .option('--json', 'print one JSON object per line')
  .option('--quick', 'smaller runs (smoke test)')
  .action(async (o: { provider?: string; runs: number; json?: boolean; quick?: boolean }) => {
    const nic = await import('../../bench/nic.js');
    await nic.benchNic({ providers: o.provider ? o.provider.split(',') : nic.defaultProviders(), runs: o.runs, json: !!o.json, quick: !!o.quick });
  });

bench
  .command('rendezvous')
  .description('time for 2..16 ranks to connect a full mesh, and store round trips per rank, per store')
  .option('--ranks <list>', 'world sizes', '2,4,8,16')
  .option('--stores <list>', 'stores: tcp, redis, file', 'tcp,redis,file')
  .option('--redis <url>', 'Redis URL for the redis store (default WEFT_TEST_REDIS_URL)', process.env.WEFT_TEST_REDIS_URL)
  .option('--runs <n>', 'runs per point; the median is reported', positiveInt, 3)
  .option('--json', 'print one JSON object per line')
  .action(async (o: { ranks: string; stores: string; redis?: string; runs: number; json?: boolean }) => {
    const r = await import('../../bench/rendezvous.js');
    await r.benchRendezvous({ ranks: o.ranks.split(',').map(Number), stores: o.stores.split(','), redis: o.redis, runs: o.runs, json: !!o.json });
  });

bench
  .command('reduce')
  .description('float32 sum per SIMD level (and reduceMany over 4 sources) vs a JS loop and memcpy, 4 KiB to 16 MiB')
  .option('--time <ms>', 'tinybench time budget per task', positiveInt, 400)
  .option('--json', 'print one JSON object per line')
  .option('--quick', 'short runs (smoke test)')
  .action(async (o: { time: number; json?: boolean; quick?: boolean }) => {
    const r = await import('../../bench/reduce.js');
    await r.benchReduce({ timeMs: o.time, json: !!o.json, quick: !!o.quick });
  });

bench
  .command('collectives')
  .description('nccl-tests style sweep of allreduce, broadcast, allgather, reduce_scatter, barrier, 8 B to 64 MiB, with Gloo and Open MPI when installed (--help for options)')
  // The options live in bench/collectives/index.ts, which parses the rest of the command line.
  .helpOption(false)
  .allowUnknownOption()
  .allowExcessArguments()
  .action(async (_o: unknown, cmd: Command) => {
    const c = await import('../../bench/collectives/index.js');
    await c.main([process.argv[0], 'weft bench collectives', ...cmd.args]);
  });

bench
  .command('rpc')
  .description('copyrpc round trip and throughput (queue depths, endpoints, payloads) vs node:net, zeromq and grpc-js')
  .option('--provider <list>', 'comma-separated providers (default: shm, and ofi when built)')
  .option('--runs <n>', 'runs per point; the median is reported', positiveInt, 3)
  .option('--json', 'print one JSON object per line')
  .option('--quick', 'smaller runs (smoke test)')
  .option('--no-peers', 'skip node:net, zeromq and grpc-js')
  .action(async (o: { provider?: string; runs: number; json?: boolean; quick?: boolean; peers: boolean }) => {
    const rpc = await import('../../bench/rpc/index.js');
    await rpc.benchRpc({ providers: o.provider ? o.provider.split(',') : rpc.defaultRpcProviders(), runs: o.runs, json: !!o.json, quick: !!o.quick, peers: o.peers });
  });

program.parseAsync().catch((err: Error) => {
  console.error(`weft: ${err.message}`);
  process.exit(1);
});

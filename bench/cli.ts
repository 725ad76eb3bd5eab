/**
 * `weft bench <name>`: the benchmark programs. bin/weft.js hands `bench` to bin/weft-bench.js,
 * which runs this file, so the shipped CLI never imports bench/. Each benchmark module is
 * loaded only when its command runs.
 */
import { Command } from 'commander';
import { positiveInt } from '../src/cli/arguments.js';

/**
 * Loads a benchmark module. The benchmarks use development dependencies of weft (tinybench,
 * vega, zeromq, grpc-js): from an installed package a missing one is named in one line, with
 * what to do, instead of a stack trace.
 */
async function load<M>(command: string, importer: () => Promise<M>): Promise<M> {
  try {
    return await importer();
  } catch (err) {
    const m = /Cannot find package '([^']+)'/.exec((err as Error).message);
    if ((err as { code?: string }).code === 'ERR_MODULE_NOT_FOUND' && m) {
      throw new Error(`${command} needs the package '${m[1]}', a development dependency of weft: install it beside weft (npm install ${m[1]}), or run the benchmarks from a clone of the repository`);
    }
    throw err;
  }
}

const bench = new Command('weft bench').description('benchmarks (each prints a table and writes JSON and SVG to bench/results/ in a checkout, ./weft-bench-results/ when installed, or WEFT_BENCH_OUT)').showHelpAfterError();
bench
  .command('nic')
  .description('64 B WRITE_IMM round trip and streaming rate per provider, vs libfabric shm and memcpy')
  .option('--provider <list>', 'comma-separated providers (default: shm, ofi:shm, ofi:tcp when built)')
  .option('--runs <n>', 'runs per measurement; the median is reported', positiveInt, 5)
  .option('--json', 'print one JSON object per line')
  .option('--quick', 'smaller runs (smoke test)')
  .action(async (o: { provider?: string; runs: number; json?: boolean; quick?: boolean }) => {
    const nic = await load('weft bench nic', () => import('./nic.js'));
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
    const r = await load('weft bench rendezvous', () => import('./rendezvous.js'));
    await r.benchRendezvous({ ranks: o.ranks.split(',').map(Number), stores: o.stores.split(','), redis: o.redis, runs: o.runs, json: !!o.json });
  });

bench
  .command('reduce')
  .description('float32 sum per SIMD level (and reduceMany over 4 sources) vs a JS loop and memcpy, 4 KiB to 16 MiB')
  .option('--time <ms>', 'tinybench time budget per task', positiveInt, 400)
  .option('--json', 'print one JSON object per line')
  .option('--quick', 'short runs (smoke test)')
  .action(async (o: { time: number; json?: boolean; quick?: boolean }) => {
    const r = await load('weft bench reduce', () => import('./reduce.js'));
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
    const c = await load('weft bench collectives', () => import('./collectives/index.js'));
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
    const rpc = await load('weft bench rpc', () => import('./rpc/index.js'));
    await rpc.benchRpc({ providers: o.provider ? o.provider.split(',') : rpc.defaultRpcProviders(), runs: o.runs, json: !!o.json, quick: !!o.quick, peers: o.peers });
  });

bench.parseAsync().catch((err: Error) => {
  console.error(err.message.startsWith('weft bench') ? err.message : `weft bench: ${err.message}`);
  process.exit(1);
});

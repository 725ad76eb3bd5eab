/** The `weft` command: info, demo, run, bench, sim. */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command, Option } from 'commander';
import { positiveInt } from './arguments.js';

// Commands load what they use when they run: --version and --help work without the native
// core, and a missing core is reported by the command that needs it, in one line.
const packageJson = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'package.json');
const { version } = JSON.parse(readFileSync(packageJson, 'utf8')) as { version: string };

const program = new Command('weft').description('collective communication and RDMA-style RPC for Node.js').version(version, '-v, --version', 'print the weft version').showHelpAfterError().enablePositionalOptions();

program
  .command('info')
  .description('weft version, available providers (libfabric and its providers), host id, shared-memory limits')
  .option('--json', 'print JSON')
  .action(async (o: { json?: boolean }) => (await import('./info.js')).printInfo(!!o.json));

program
  .command('demo')
  .description('run a few ranks on this host and show their traffic')
  .option('-n, --ranks <n>', 'number of ranks', positiveInt, 4)
  .option('--provider <p>', "provider: 'shm', 'ofi', 'ofi:tcp', 'ofi:shm'", process.env.WEFT_PROVIDER ?? 'shm')
  .option('--laps <n>', 'token-ring laps', positiveInt, 2000)
  .option('--blocks <n>', '1 MiB writes per rank', positiveInt, 256)
  .option('--no-kv', 'skip the few seconds of benchkv at the end')
  .action(async (o: { ranks: number; provider: string; laps: number; blocks: number; kv: boolean }) => {
    process.exitCode = await (await import('./demo.js')).runDemo(o);
  });

program
  .command('run')
  .description('start N ranks of a script on this host (rank environment set, TcpStore hosted here unless --store)')
  .requiredOption('-n, --ranks <n>', 'ranks on this host', positiveInt)
  .addOption(new Option('--store <url>', 'store URL (redis://, rediss://, tcp://, file://); default: a TcpStore hosted by this launcher, with a per-job secret. Keep passwords off the command line: give the URL in WEFT_STORE and the password in WEFT_STORE_PASSWORD or WEFT_STORE_PASSWORD_FILE').env('WEFT_STORE'))
  .option('--prefix <p>', 'job namespace in the store (default: a fresh id on one host, weft-job on several)')
  .option('--nnodes <k>', 'hosts in the job (each runs weft run with its --node-rank)', positiveInt, 1)
  .option('--node-rank <r>', "this host's index in [0, nnodes)", (v: string) => Number(v), 0)
  .option('--master-addr <addr>', 'several hosts without --store: node 0 hosts a TcpStore on this address (one the other hosts reach); needs WEFT_STORE_SECRET(_FILE) on every host')
  .option('--master-port <port>', 'port of the --master-addr store (default 29500)', positiveInt)
  .option('--iface <name>', 'network interface the ranks\' fabric endpoints bind (WEFT_IFACE; default: the route toward the store)')
  .option('--provider <p>', 'WEFT_PROVIDER for the ranks (default: shm inside a host, the fabric between hosts)')
  .addOption(new Option('--join-timeout <s>', 'several hosts: seconds a launcher waits for the other hosts\' launchers before it fails naming them').env('WEFT_JOIN_TIMEOUT').argParser(positiveInt).default(300))
  .argument('<script>', 'a .js or .ts file')
  .argument('[args...]', 'arguments for the script')
  .passThroughOptions()
  .action(async (script: string, args: string[], o: { ranks: number; store?: string; prefix?: string; nnodes: number; nodeRank: number; provider?: string; masterAddr?: string; masterPort?: number; iface?: string; joinTimeout: number }, cmd: Command) => {
    const { launch, passwordWarning } = await import('../launch/run.js');
    // A password in our own argv is visible to every local user (ps); the ranks get the URL in
    // their environment, so the only leak is this command line.
    const warning = o.store !== undefined && cmd.getOptionValueSource('store') === 'cli' ? passwordWarning(o.store) : undefined;
    if (warning) process.stderr.write(`${warning}\n`);
    process.exitCode = await launch({ ranks: o.ranks, script, args, store: o.store, prefix: o.prefix, nnodes: o.nnodes, nodeRank: o.nodeRank, provider: o.provider, masterAddr: o.masterAddr, masterPort: o.masterPort, iface: o.iface, joinTimeoutMs: o.joinTimeout * 1000 });
  });

// The benchmarks are their own program (bench/cli.ts), run by bin/weft-bench.js as a child:
// shipped code never imports bench/.
program.command('bench', 'benchmarks: nic, rendezvous, reduce, collectives, rpc, ipc, kv, transfer (each prints a table and writes JSON and SVG to bench/results/ in a checkout, ./weft-bench-results/ when installed, or WEFT_BENCH_OUT)', { executableFile: 'weft-bench.js' });
// The models likewise (bench/sim/cli.ts via bin/weft-sim.js).
program.command('sim', 'models: daemon-loop (the CQE batching memo: poll controllers across NP; docs/bistability.md)', { executableFile: 'weft-sim.js' });

program.parseAsync().catch((err: Error) => {
  // Our own errors already say what to do: one line, no stack.
  console.error(err.message.startsWith('weft') ? err.message : `weft: ${err.message}`);
  process.exit(1);
});

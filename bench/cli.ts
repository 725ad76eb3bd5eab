/**
 * `weft bench <name>`: the benchmark programs. bin/weft.js hands `bench` to bin/weft-bench.js,
 * which runs this file, so the shipped CLI never imports bench/. Each benchmark owns its
 * command (`bench/<name>/` exports it); this program only gathers them. What a benchmark
 * imports at load is a dependency of the package; its development dependencies (plots: vega;
 * the RPC peers: zeromq, grpc-js) are loaded when used and skipped with a line naming them.
 */
import { Command } from 'commander';
import { collectivesCommand } from './collectives/index.js';
import { ipcCommand } from './ipc/index.js';
import { nicCommand } from './nic/index.js';
import { peersCommand } from './peers/index.js';
import { reduceCommand } from './reduce/index.js';
import { rendezvousCommand } from './rendezvous/index.js';
import { rpcCommand } from './rpc/index.js';
import { kvCommand } from './kv/index.js';
import { transferCommand } from './transfer/index.js';

const bench = new Command('weft bench')
  .description('benchmarks (each prints a table and writes JSON and SVG to bench/results/ in a checkout, ./weft-bench-results/ when installed, or WEFT_BENCH_OUT)')
  .showHelpAfterError();
for (const command of [nicCommand(), rendezvousCommand(), reduceCommand(), collectivesCommand(), rpcCommand(), ipcCommand(), kvCommand(), transferCommand(), peersCommand()]) bench.addCommand(command);

bench.parseAsync().catch((err: Error) => {
  console.error(err.message.startsWith('weft bench') ? err.message : `weft bench: ${err.message}`);
  process.exit(1);
});

/**
 * `weft sim <model>`: models run as programs (bin/weft-sim.js runs this file, so the shipped
 * CLI never imports bench/). One model so far: the daemon loop of the CQE batching memo.
 */
import { Command } from 'commander';
import { daemonLoopCommand } from './daemon-loop/index.js';

const sim = new Command('weft sim').description('models: daemon-loop (the CQE batching memo, docs/bistability.md)').showHelpAfterError();
sim.addCommand(daemonLoopCommand());

sim.parseAsync().catch((err: Error) => {
  console.error(err.message.startsWith('weft sim') ? err.message : `weft sim: ${err.message}`);
  process.exit(1);
});

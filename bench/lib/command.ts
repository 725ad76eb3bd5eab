/**
 * Each benchmark owns its command (`bench/<name>/` exports it): `weft bench <name>` adds it
 * to its program (bench/cli.ts), and `node dist/bench/<name>/index.js` runs it on its own.
 */
import { InvalidArgumentError, type Command } from 'commander';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

/** Parses the command line with `command()` when the module at `moduleUrl` is the program. */
export function runIfMain(moduleUrl: string, command: () => Command): void {
  if (!process.argv[1] || fileURLToPath(moduleUrl) !== path.resolve(process.argv[1])) return;
  command()
    .parseAsync(process.argv)
    .catch((err: unknown) => {
      console.error(err instanceof Error ? err.message : err);
      process.exit(1);
    });
}

/**
 * `--quick`: smaller values for the options the user left at their defaults (an option given
 * on the command line wins). Returns `o`, changed in place.
 */
export function applyQuick<O extends { quick?: boolean }>(o: O, cmd: Command, quick: Partial<O>): O {
  if (!o.quick) return o;
  for (const [name, value] of Object.entries(quick)) {
    if (cmd.getOptionValueSource(name) === 'default') (o as Record<string, unknown>)[name] = value;
  }
  return o;
}

/** An option parser for integers of at least `min` (commander calls it with the text). */
export function integerAtLeast(min: number): (v: string) => number {
  return (v: string) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < min) throw new InvalidArgumentError(`an integer >= ${min}`);
    return n;
  };
}

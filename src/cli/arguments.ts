/** Option parsers the CLI programs share (weft, weft bench). */
import { InvalidArgumentError } from 'commander';

/** Commander parser of a positive integer option. */
export function positiveInt(v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('must be a positive integer');
  return n;
}

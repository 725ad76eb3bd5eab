/**
 * Runs the whole reduction matrix (reduce-reference.ts) in this process, whose kernels were
 * chosen by WEFT_REDUCE_ISA at load, and prints one JSON line: { isa, pairs, failures }.
 * Exit code 0 when every pair matched its reference.
 */
import { reduceIsa } from '../../../src/reduce/index.js';
import { checkBinary, checkMany, definedPairs } from '../reference.js';

const failures: string[] = [];
const pairs = definedPairs();
for (const [op, dtype] of pairs) failures.push(...checkBinary(op, dtype, 2), ...checkMany(op, dtype, 2));
console.log(JSON.stringify({ isa: reduceIsa(), pairs: pairs.length, failures: failures.slice(0, 20), failed: failures.length }));
process.exit(failures.length ? 1 : 0);

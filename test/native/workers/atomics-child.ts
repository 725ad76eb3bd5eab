/** Child of the native tests: `atomics-child.js <segment> <op> <n>`. */
import { native } from '../../../src/native/binding.js';

const [name, op, nS] = process.argv.slice(2);
const i32 = new Int32Array(native.shmOpen(name));
const n = Number(nS);
if (op === 'add') {
  for (let i = 0; i < n; i++) Atomics.add(i32, 0, 1);
} else if (op === 'wake') {
  Atomics.add(i32, 1, 1);
  native.futexWake(i32, 1);
}
process.exit(0);

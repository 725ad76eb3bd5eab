/**
 * A rank whose event loop never turns: it prints its pid, then loops allreduceSync forever
 * (test/rendezvous/launcher-death.test.ts kills its launcher and checks that it goes away).
 */
import { init } from '../../../src/index.js';

const ctx = await init();
const x = new Float32Array(Number(process.argv[2] ?? 4));
ctx.allreduceSync(x);
console.log(`looping pid ${process.pid}`);
for (;;) ctx.allreduceSync(x);

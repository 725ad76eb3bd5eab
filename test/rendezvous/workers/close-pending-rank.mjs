// A rank for the close test: an async wait on the shared progress loop is pending (its
// condition never holds) when the context closes; the wait must fail with ECLOSED and the
// process go on (the loop, woken after the close, once polled the closed CQ and the error
// ended the process). Prints "close rank R: CODE".
import { init } from '../../../dist/src/index.js';
import { Deadline } from '../../../dist/src/util/deadline.js';

const ctx = await init({ timeoutMs: 20_000 });
ctx.barrierSync();
const pending = ctx.router.waitAsync(() => false, { deadline: new Deadline(20_000), what: 'a wait that never ends' });
const outcome = pending.then(() => 'resolved', (err) => err.code);
await new Promise((r) => setTimeout(r, 50)); // the loop is asleep on the CQ now
await ctx.close();
await new Promise((r) => setTimeout(r, 100)); // room for the loop to wake and poll
console.log(`close rank ${ctx.rank}: ${await outcome}`);

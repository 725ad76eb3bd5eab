/**
 * Joins a job from WEFT_RANK / WEFT_WORLD_SIZE / WEFT_STORE / WEFT_PREFIX and prints one JSON
 * line: {ok} or {code, message}, with the milliseconds init took (test/rendezvous/join.test.ts).
 * Arg 'sync': an allreduceSync right after init; 'timeout=<ms>': init's timeoutMs (default 20 s).
 */
import { init, type WeftError } from '../../../src/index.js';

const t0 = performance.now();
try {
  const given = process.argv.find((a) => a.startsWith('timeout='));
  const ctx = await init({ timeoutMs: given ? Number(given.slice(8)) : 20_000 });
  if (process.argv[2] === 'sync') {
    // At once a call that blocks the event loop: on the rank hosting the store, too.
    const x = ctx.allreduceSync(new Float32Array(4).fill(1), { timeoutMs: 20_000 });
    if (x[0] !== ctx.size) throw new Error(`allreduceSync gave ${x[0]}, not ${ctx.size}`);
  }
  console.log(JSON.stringify({ ok: true, ms: performance.now() - t0 }));
  await ctx.close();
} catch (err) {
  const e = err as WeftError;
  console.log(JSON.stringify({ code: e.code, message: e.message, ms: performance.now() - t0 }));
  process.exitCode = 1;
}

/**
 * The completion router's shared loop keeps every async waiter's deadline: a wait that starts
 * while the loop sleeps toward a later deadline (an engine's 60 s progress waiter) still times
 * out on time. It overslept until something else woke the loop.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createDevice } from '../../src/nic/index.js';
import { CompletionRouter } from '../../src/nic/completion-router.js';
import { native } from '../../src/native/binding.js';
import { Deadline } from '../../src/util/deadline.js';
import { WeftError } from '../../src/errors.js';

const providers = native.ofi.available ? ['shm', 'ofi'] : ['shm'];

for (const provider of providers) {
  test(`a short wait that joins a long one times out on time (${provider})`, async () => {
    const device = await createDevice({ provider, label: 'rank 0', job: `routerdl${process.pid}` });
    const router = new CompletionRouter(device);
    const stop = new AbortController();
    try {
      const long = router.waitAsync(() => false, { deadline: new Deadline(60_000, stop.signal), what: 'the long wait' }).catch((e: unknown) => e);
      // Let the loop reach its sleep toward the long deadline.
      await new Promise((r) => setTimeout(r, 300));
      const t0 = performance.now();
      const err = await router.waitAsync(() => false, { deadline: new Deadline(200), what: 'the short wait' }).then(
        () => undefined,
        (e: unknown) => e,
      );
      const ms = performance.now() - t0;
      assert.ok(err instanceof WeftError && err.code === 'ETIMEDOUT', String(err));
      // 200 ms asked; before the fix it ended with the long wait (60 s). 10 s bounds a loaded machine.
      assert.ok(ms < 10_000, `the 200 ms wait ended after ${Math.round(ms)} ms`);
      stop.abort();
      const longErr = await long;
      assert.ok(longErr instanceof WeftError && longErr.code === 'EABORTED', String(longErr));
    } finally {
      stop.abort();
      device.close();
    }
  });
}

test.run();

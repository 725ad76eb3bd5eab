/**
 * The one waiting loop's async form (src/host/wait.ts): between event-loop turns it yields and
 * polls as the blocking form does, yet a caller that awaits short waits in a loop still gets
 * its timers and messages, and a wait never ends by its deadline before the loop has turned.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { waitAsync, type Doorbell } from '../../src/host/wait.js';
import { Deadline } from '../../src/util/deadline.js';
import type { WeftError } from '../../src/errors.js';

/** A doorbell nobody rings: sleeps are plain timers. */
const silent: Doorbell = {
  sleepSync: () => {},
  sleepAsync: (ms) => new Promise((r) => setTimeout(r, ms)),
};

for (const oversubscribed of [true, false]) {
  test(`a wait that ends by its 1 ms deadline has let the event loop turn (oversubscribed: ${oversubscribed})`, async () => {
    for (let k = 0; k < 20; k++) {
      let turned = false;
      setImmediate(() => (turned = true));
      let code: string | undefined;
      try {
        await waitAsync(() => false, silent, { oversubscribed, call: { deadline: new Deadline(1), what: 'test wait' } });
      } catch (err) {
        code = (err as WeftError).code;
      }
      assert.is(code, 'ETIMEDOUT', `wait ${k}`);
      assert.ok(turned, `wait ${k} timed out without the event loop turning: a caller waiting in a loop would never see its messages`);
    }
  });
}

test('a caller awaiting 1 ms waits in a loop gets a message sent to it meanwhile', async () => {
  let got = false;
  const { port1, port2 } = new MessageChannel();
  port1.onmessage = () => (got = true);
  port2.postMessage('release');
  const by = performance.now() + 10_000;
  while (!got && performance.now() < by) {
    try {
      await waitAsync(() => false, silent, { oversubscribed: true, call: { deadline: new Deadline(1), what: 'test wait' } });
    } catch (err) {
      if ((err as WeftError).code !== 'ETIMEDOUT') throw err;
    }
  }
  port1.close();
  assert.ok(got, 'the message never arrived while the caller waited 1 ms at a time');
});

test.run();

/**
 * copyrpc engines in worker threads of one process: each thread opens its own shm device
 * (benchkv's daemons and clients do), so device segment names must differ per thread, and a
 * worker terminated before it closes its engine must still remove its segments.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readdirSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import { fileURLToPath } from 'node:url';

const WORKER = fileURLToPath(new URL('./workers/thread-engine.js', import.meta.url));

function ours(): string[] {
  return readdirSync('/dev/shm').filter((n) => n.startsWith(`weft.threads-test.${process.pid}.`));
}

function start(role: 'serve' | 'call'): Worker {
  return new Worker(WORKER, { workerData: { role }, env: { ...process.env, WEFT_JOB: 'threads-test' } });
}

function next<T>(w: Worker): Promise<T> {
  return new Promise((resolve, reject) => {
    w.once('message', resolve);
    w.once('error', reject);
  });
}

test('two worker threads of one process each open a shm device and call each other', async () => {
  const a = start('serve');
  const b = start('call');
  const [ia, ib] = await Promise.all([next<Uint8Array>(a), next<Uint8Array>(b)]);
  // Both devices exist at once, under different names.
  const names = ours();
  assert.ok(names.some((n) => n.includes('.t' + a.threadId + 'd0.')), names.join(' '));
  assert.ok(names.some((n) => n.includes('.t' + b.threadId + 'd0.')), names.join(' '));
  a.postMessage(ib);
  b.postMessage(ia);
  const answered = await next<number>(b);
  assert.is(answered, 200);
  await b.terminate();
  // The serving thread never closes its engine: terminate() must still unlink its segments.
  await a.terminate();
  assert.equal(ours(), []);
});

test.run();

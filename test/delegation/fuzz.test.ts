/**
 * A hostile process with write access scribbles random bytes over a live segment (header,
 * ring indices, slots, client lines) while a server and two clients run in their own
 * processes. Whatever it hits, every party must end within its timeouts with either its
 * work done or a WeftError naming what went wrong: no crash, no hang, no out-of-range access
 * (a RangeError or TypeError would be reported with that name and fail the test).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { sweepDeadSegments, unlinkSegment } from '../../src/host/segments.js';
import { start, type Msg } from './parties.js';

const SEEDS = process.env.WEFT_SOAK === '1' ? [1, 2, 3, 4, 5, 6, 7, 8] : [1, 2];
const CODES = new Set(['EPROTO', 'ETIMEDOUT', 'EPEERDEAD', 'EINVAL', 'ECLOSED']);

function acceptable(m: Msg): boolean {
  if (m.event === 'done') return true;
  return m.event === 'error' && (m.name === 'WeftError' || m.name === 'ServerDisconnected') && CODES.has(m.code as string);
}

for (const kind of ['dlg', 'ipc'] as const) {
  for (const seed of SEEDS) {
    test(`${kind}: a hostile writer fuzzing the shared bytes gives bounded errors (seed ${seed})`, async () => {
      const server = start('processes', { role: `${kind}-server`, producers: 2, expect: 1e9, ringDepth: 8, respDepth: 4, timeoutMs: 4_000 });
      const ready = await server.next('ready');
      assert.is(ready.event, 'ready');
      const name = ready.name as string;
      const clients = [0, 1].map((p) => start('processes', { role: `${kind}-client`, name, producer: p, calls: 1e9, qd: 4, timeoutMs: 1_500 }));
      const hostile = start('processes', { role: 'hostile', name, ms: 1_500, seed });
      const ends = await Promise.all([server, ...clients].map((p) => p.next('done', 30_000).catch((e: Error) => ({ event: 'hang', message: e.message }) as Msg)));
      await hostile.next('done', 30_000);
      for (const [i, m] of ends.entries()) assert.ok(acceptable(m), `party ${i}: ${JSON.stringify(m)}`);
      await Promise.all([server, ...clients, hostile].map((p) => p.exited));
      sweepDeadSegments(server.pid);
      unlinkSegment(name);
    });
  }
}

test.run();

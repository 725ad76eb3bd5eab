/**
 * Exactly once and in order per client, for each of the three parts, between threads and
 * between processes: 4 producers, ring depths small enough to wrap and fill all the time.
 * delegationrpc: 10^6 calls per producer (the count); ipc and Flux: 10^5, and 2 x 10^5
 * with plain-store producers (10^6 with WEFT_SOAK=1; npm test's 15 minutes).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { start, type Placement } from './parties.js';

const SOAK = process.env.WEFT_SOAK === '1';
const PRODUCERS = 4;

/** `plainPublish(p)`: false runs producer p (a process) with WEFT_REMOTE_FENCES=0 (it publishes with Atomics.store). */
async function run(kind: 'dlg' | 'ipc', placement: Placement, calls: number, plainPublish: (p: number) => boolean = () => true): Promise<void> {
  const server = start(placement, { role: `${kind}-server`, producers: PRODUCERS, expect: PRODUCERS * calls, ringDepth: 8, respDepth: 4, timeoutMs: 600_000 });
  const ready = await server.next('ready');
  assert.is(ready.event, 'ready', JSON.stringify(ready));
  const clients = Array.from({ length: PRODUCERS }, (_, p) => start(placement, { role: `${kind}-client`, name: ready.name as string, producer: p, calls, qd: 4 + p, timeoutMs: 60_000 }, plainPublish(p) ? undefined : { WEFT_REMOTE_FENCES: '0' }));
  const results = await Promise.all(clients.map((c) => c.next('done', 600_000)));
  for (const [p, r] of results.entries()) {
    assert.is(r.event, 'done', `producer ${p}: ${JSON.stringify(r)}`);
    assert.is(r.got, calls, `producer ${p} got ${r.got} answers`);
    assert.is(r.bad, 0, `producer ${p}: ${r.firstBad}`);
  }
  const done = await server.next('done', 600_000);
  assert.is(done.served, PRODUCERS * calls, JSON.stringify(done));
  assert.is(done.errors, 0, `server saw requests out of order: ${done.first}`);
  assert.equal(done.next, Array(PRODUCERS).fill(calls));
  await Promise.all([server.exited, ...clients.map((c) => c.exited)]);
}

async function runFlux(placement: Placement, calls: number): Promise<void> {
  // Node 0 answers; nodes 1..4 each call it (a producer apiece), through one mesh.
  const server = start(placement, { role: 'flux-node', nodes: PRODUCERS + 1, producers: PRODUCERS, expect: PRODUCERS * calls, ringDepth: 16, qd: 8, timeoutMs: 600_000 });
  const ready = await server.next('ready');
  assert.is(ready.event, 'ready', JSON.stringify(ready));
  const callers = Array.from({ length: PRODUCERS }, (_, p) => start(placement, { role: 'flux-caller', name: ready.name as string, nodeId: p + 1, producer: p, calls, qd: 8, timeoutMs: 60_000 }));
  const results = await Promise.all(callers.map((c) => c.next('done', 600_000)));
  for (const [p, r] of results.entries()) {
    assert.is(r.event, 'done', `caller ${p}: ${JSON.stringify(r)}`);
    assert.is(r.got, calls);
    assert.is(r.bad, 0, `caller ${p}: ${r.firstBad}`);
  }
  const done = await server.next('done', 600_000);
  assert.is(done.served, PRODUCERS * calls);
  assert.is(done.errors, 0, `node 0 saw calls out of order: ${done.first}`);
  await Promise.all([server.exited, ...callers.map((c) => c.exited)]);
}

// Producers that publish with plain stores (registered for membarrier) beside producers that
// keep Atomics.store (WEFT_REMOTE_FENCES=0, as on a kernel without membarrier), on one ring.
for (const kind of ['dlg', 'ipc'] as const) {
  test(`${kind === 'dlg' ? 'delegationrpc' : 'ipc'}: plain-store and Atomics.store producers on one server, exactly once, in order (processes)`, async () => {
    await run(kind, 'processes', SOAK ? 1_000_000 : 200_000, (p) => p % 2 === 0);
  });
}

for (const placement of ['threads', 'processes'] as const) {
  test(`delegationrpc: ${PRODUCERS} producers x 10^6 calls, exactly once, in order (${placement})`, async () => {
    await run('dlg', placement, 1_000_000);
  });
  test(`ipc: ${PRODUCERS} producers, exactly once, in order (${placement})`, async () => {
    await run('ipc', placement, SOAK ? 1_000_000 : 100_000);
  });
  test(`Flux: ${PRODUCERS} callers into one node, exactly once, in order (${placement})`, async () => {
    await runFlux(placement, SOAK ? 1_000_000 : 100_000);
  });
}

test.run();

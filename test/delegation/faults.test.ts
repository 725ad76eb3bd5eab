/**
 * The faults the design notes leave open: holes (a slow committer; a client killed between
 * its fetch_add and its commit), a dead server, too many clients, a dead ipc client, a dead
 * Flux node. Real threads and real processes, SIGKILL and worker.terminate().
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { DelegationClient, DelegationServer, FluxNode, IpcClient, IpcServer, ServerDisconnected } from '../../src/delegation/index.js';
import { listSegments, sweepDeadSegments } from '../../src/host/segments.js';
import { start } from './parties.js';
import { CLIENT, clientWord } from '../../src/delegation/delegation-layout.js';
import { clientBlock, ICLI } from '../../src/delegation/ipc-layout.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls the server until it has `n` requests or `ms` pass; returns the payload bytes 0 of each. */
async function drain(server: DelegationServer, n: number, ms = 10_000): Promise<number[]> {
  const got: number[] = [];
  const end = performance.now() + ms;
  while (got.length < n && performance.now() < end) {
    if (server.poll() === 0) {
      await sleep(1);
      continue;
    }
    for (let e = server.recv(); e !== null; e = server.recv()) {
      got.push(e.payload[0]);
      server.reply(e.clientId, e.respSlot, e.payload);
    }
    server.advanceTail();
  }
  return got;
}

test('a hole: the server stops at a slow committer, does not skip it while it lives, then takes both in ring order', async () => {
  const server = DelegationServer.create({ maxClients: 4, ringDepth: 8, respDepth: 4, requestBytes: 8, responseBytes: 8, holeTimeoutMs: 20 });
  const a = DelegationClient.connect<string>(server.name);
  const b = DelegationClient.connect<string>(server.name);
  const slow = a.begin('a')!;
  slow[0] = 1;
  assert.ok(b.call(Uint8Array.of(2), 'b'));
  assert.is(server.poll(), 0, 'the hole at position 0 stops the scan');
  assert.is(server.recv(), null);
  await sleep(60);
  for (let i = 0; i < 600; i++) server.poll();
  assert.is(server.stats.holesSkipped, 0, 'a live slow committer is waited for');
  a.commit();
  assert.equal(await drain(server, 2), [1, 2]);
  const seen: string[] = [];
  a.poll((u) => seen.push(u));
  b.poll((u) => seen.push(u));
  assert.equal(seen.sort(), ['a', 'b']);
  a.close();
  b.close();
  server.close();
});

test('a hole whose owner commits while the server decides to skip it is taken in order, never skipped and found a lap later', () => {
  const server = DelegationServer.create({ maxClients: 4, ringDepth: 4, respDepth: 8, requestBytes: 8, responseBytes: 8, holeTimeoutMs: 1 });
  const a = DelegationClient.connect<string>(server.name);
  const b = DelegationClient.connect<string>(server.name);
  const internals = server as unknown as { checkHole(): void; holeIsOwnedByLiveClient(): boolean; cursor: number };
  const headWord = new Int32Array(Object.getOwnPropertyDescriptor(server, 'u8')!.value.buffer, 128, 1);
  a.begin('late')!.fill(7);
  internals.checkHole();
  const until = performance.now() + 5;
  while (performance.now() < until);
  // The race, made certain: a's commit lands after the hole was seen and before its owner's
  // phase is read, so the phases say nobody owns it.
  const phases = internals.holeIsOwnedByLiveClient;
  internals.holeIsOwnedByLiveClient = function (this: unknown) {
    a.commit();
    return phases.call(this);
  };
  internals.checkHole();
  internals.holeIsOwnedByLiveClient = phases;
  assert.is(server.stats.holesSkipped, 0, 'a hole committed meanwhile is not skipped');
  for (let k = 0; k < 3; k++) assert.ok(b.call(Uint8Array.of(k + 1), `b${k}`));
  const got: number[] = [];
  assert.is(server.poll(), 4);
  for (let e = server.recv(); e !== null; e = server.recv()) {
    got.push(e.payload[0]);
    server.reply(e.clientId, e.respSlot, e.payload);
  }
  server.advanceTail();
  assert.equal(got, [7, 1, 2, 3], 'the late request first, in ring order');
  assert.is(internals.cursor, Atomics.load(headWord, 0), 'the cursor stops at head');
  // The next call is taken at once (a cursor past head would leave it waiting a lap).
  assert.ok(b.call(Uint8Array.of(9), 'b-next'));
  assert.is(server.poll(), 1);
  a.close();
  b.close();
  server.close();
});

test('a live hole behind requests the server still holds: the tail stays put, so their slots are not handed out again', async () => {
  const server = DelegationServer.create({ maxClients: 4, ringDepth: 4, respDepth: 4, requestBytes: 8, responseBytes: 8, holeTimeoutMs: 1 });
  const a = DelegationClient.connect<string>(server.name);
  const b = DelegationClient.connect<string>(server.name);
  const tailWord = new Int32Array(Object.getOwnPropertyDescriptor(server, 'u8')!.value.buffer, 192, 1);
  assert.ok(a.call(Uint8Array.of(1), 'a'));
  assert.is(server.poll(), 1);
  const held = server.recv()!; // held: its slot stays the server's until advanceTail()
  b.begin('b')![0] = 2; // a live slow committer right behind it
  // The hole is looked at every 256th empty poll: noted, then examined once older than 1 ms.
  for (let round = 0; round < 3; round++) {
    for (let i = 0; i < 256; i++) server.poll();
    await sleep(5);
  }
  assert.is(Atomics.load(tailWord, 0), 0, 'the tail did not move past the held request');
  assert.is(held.payload[0], 1);
  server.reply(held.clientId, held.respSlot, held.payload);
  server.advanceTail();
  assert.is(Atomics.load(tailWord, 0), 1, "the caller's advanceTail() publishes it");
  b.commit();
  assert.equal(await drain(server, 1), [2]);
  a.close();
  b.close();
  server.close();
});

test('a run of abandoned positions up to head is skipped in one pass, not one timeout each', async () => {
  const server = DelegationServer.create({ maxClients: 4, ringDepth: 64, respDepth: 4, requestBytes: 8, responseBytes: 8, holeTimeoutMs: 5 });
  const a = DelegationClient.connect<string>(server.name);
  const headWord = new Int32Array(Object.getOwnPropertyDescriptor(server, 'u8')!.value.buffer, 128, 1);
  // 20 positions nobody will commit (a stray write to head, or 20 calls abandoned on timeout).
  Atomics.add(headWord, 0, 20);
  const internals = server as unknown as { checkHole(): void };
  internals.checkHole(); // the hole at the cursor is noted
  await sleep(10);
  internals.checkHole(); // and examined: nobody owns it
  assert.is(server.stats.holesSkipped, 20);
  assert.ok(a.call(Uint8Array.of(5), 'after'), 'the ring takes calls again at once');
  assert.equal(await drain(server, 1), [5]);
  a.close();
  server.close();
});

test('a client that closes with calls still in the ring keeps its id until they are answered: the next owner never gets their answers', () => {
  const server = DelegationServer.create({ maxClients: 1, ringDepth: 8, respDepth: 2, requestBytes: 1, responseBytes: 1 });
  const a = DelegationClient.connect<string>(server.name);
  assert.ok(a.call(Uint8Array.of(1), 'A1'));
  assert.ok(a.call(Uint8Array.of(2), 'A2'));
  a.close();
  assert.is(server.poll(), 2);
  const e1 = server.recv()!;
  server.reply(e1.clientId, e1.respSlot, e1.payload);
  assert.throws(() => DelegationClient.connect(server.name), /max_clients = 1 clients attached \(a closed client's id is freed once the server has answered all its calls\)/, 'A2 is still to be answered');
  const e2 = server.recv()!;
  assert.is(e2.payload[0], 2);
  server.reply(e2.clientId, e2.respSlot, e2.payload);
  server.advanceTail();
  const b = DelegationClient.connect<string>(server.name);
  assert.is(b.clientId, 0, 'the id is free again');
  const seen: string[] = [];
  assert.ok(b.call(Uint8Array.of(10), 'B1'));
  assert.is(b.poll((u) => seen.push(u)), 0, 'nothing for B before the server has seen B1');
  assert.is(server.poll(), 1);
  const e3 = server.recv()!;
  assert.is(e3.payload[0], 10);
  server.reply(e3.clientId, e3.respSlot, Uint8Array.of(11));
  assert.is(b.poll((u, r) => seen.push(`${u}:${r[0]}`)), 1);
  assert.equal(seen, ['B1:11']);
  b.close();
  server.close();
});

for (const placement of ['processes', 'threads'] as const) {
  test(`a client ${placement === 'processes' ? 'SIGKILLed' : 'terminated'} between fetch_add and commit: its hole is skipped and the others go on (${placement})`, async () => {
    const server = DelegationServer.create({ maxClients: 4, ringDepth: 8, respDepth: 4, requestBytes: 16, responseBytes: 16, holeTimeoutMs: 30, reapIntervalMs: 20 });
    const hang = start(placement, { role: 'dlg-hang', name: server.name });
    const reserved = await hang.next('reserved');
    assert.is(reserved.event, 'reserved', JSON.stringify(reserved));
    await hang.kill();
    const other = DelegationClient.connect<number>(server.name);
    for (let i = 0; i < 20; i++) {
      const req = new Uint8Array(16);
      req[0] = 100 + i;
      while (!other.call(req, i)) {
        await drain(server, 0, 1);
        other.poll();
      }
      const got = await drain(server, 1);
      assert.equal(got, [100 + i]);
      assert.is(other.poll(), 1);
    }
    assert.is(server.stats.holesSkipped, 1);
    assert.ok(server.stats.clientsReaped >= 1, 'the dead client was detached');
    other.close();
    server.close();
  });

  test(`a dead server: a client's wait fails with ServerDisconnected well within its timeout (${placement})`, async () => {
    for (const kind of ['dlg', 'ipc'] as const) {
      const srv = start(placement, { role: `${kind}-server`, producers: 1, expect: 1e9, timeoutMs: 120_000 });
      const ready = await srv.next('ready');
      const client = kind === 'dlg' ? DelegationClient.connect<number>(ready.name as string) : IpcClient.connect<number>(ready.name as string);
      const req = new Uint8Array(16);
      assert.ok(client.call(req, 0));
      while (client.poll() === 0) await client.wait({ timeoutMs: 10_000 });
      await srv.kill();
      if (placement === 'threads') {
        // A terminated worker's segments are unlinked as its environment ends.
        assert.not.ok(listSegments().includes(ready.name as string), 'the terminated server thread left its segment');
      } else {
        // A SIGKILLed process cannot unlink: the next sweep (weft run does one) does.
        sweepDeadSegments(srv.pid);
      }
      const err = await (async () => {
        try {
          for (let i = 0; i < 1e6; i++) {
            if (client.inFlight < 4) client.call(req, i);
            client.poll();
            if (client.inFlight > 0) await client.wait({ timeoutMs: 20_000 });
          }
        } catch (e) {
          return e as Error;
        }
        return undefined;
      })();
      // ServerDisconnected, not ETIMEDOUT: the death was noticed within the wait's timeout.
      assert.ok(err instanceof ServerDisconnected, `${kind}: ${err?.message}`);
      assert.match(err!.message, /server of .* (died|closed)/);
      client.close();
    }
  });
}

test('more clients than max_clients: a clear error; a closed client frees its id', () => {
  const server = DelegationServer.create({ maxClients: 2, ringDepth: 4, respDepth: 2, requestBytes: 8, responseBytes: 8 });
  const a = DelegationClient.connect(server.name);
  const b = DelegationClient.connect(server.name);
  assert.throws(() => DelegationClient.connect(server.name), (e: Error & { code?: string }) => e.code === 'EINVAL' && /max_clients = 2/.test(e.message));
  a.close();
  const c = DelegationClient.connect(server.name);
  assert.is(c.clientId, a.clientId);
  assert.throws(() => DelegationClient.connect(server.name, { requestBytes: 16 }), /requestBytes 16, but the ring/);
  b.close();
  c.close();
  server.close();
  assert.throws(() => DelegationClient.connect(server.name), (e: Error & { code?: string }) => e.code === 'EPEERDEAD');
});

test('ipc: a SIGKILLed client is reaped, its id reused, and the next owner starts clean', async () => {
  const server = IpcServer.create({ maxClients: 1, depth: 4, requestBytes: 16, responseBytes: 16, reapIntervalMs: 20 });
  const ipcServe = async (n: number) => {
    let served = 0;
    const end = performance.now() + 10_000;
    while (served < n && performance.now() < end) {
      const r = server.recv();
      if (r === null) {
        await sleep(1);
        continue;
      }
      server.reply(r.clientId, r.tag, r.payload);
      served++;
    }
    return served;
  };
  const victim = start('processes', { role: 'ipc-client', name: server.name, producer: 0, calls: 1e9, qd: 4, timeoutMs: 60_000 });
  assert.ok((await ipcServe(100)) === 100);
  await victim.kill();
  let next: IpcClient<number> | undefined;
  const end = performance.now() + 10_000;
  while (!next && performance.now() < end) {
    await ipcServe(1).catch(() => 0);
    try {
      next = IpcClient.connect<number>(server.name);
    } catch {
      await sleep(10);
    }
  }
  assert.ok(next, 'the dead client\'s id was released');
  assert.ok(server.stats.clientsReaped >= 1);
  for (let i = 0; i < 10; i++) {
    const req = new Uint8Array(16);
    req[0] = i;
    assert.ok(next!.call(req, i));
    assert.is(await ipcServe(1), 1);
    let got = -1;
    assert.is(next!.poll((u, r) => (got = u * 1000 + r[0])), 1);
    assert.is(got, i * 1000 + i);
  }
  next!.close();
  server.close();
});

test('Flux: a node that dies owing replies fails its callers\' waits with ServerDisconnected', async () => {
  const caller = FluxNode.create<number>({ nodes: 2, payloadBytes: 16 });
  const peer = start('processes', { role: 'flux-node', name: caller.name, nodeId: 1, producers: 1, expect: 1, timeoutMs: 60_000 });
  await peer.next('ready');
  const req = new Uint8Array(16);
  assert.ok(caller.call(1, req, 1));
  await caller.wait({ timeoutMs: 10_000 });
  assert.is(caller.poll(), 1);
  await peer.kill();
  assert.ok(caller.call(1, req, 2));
  try {
    await caller.wait({ timeoutMs: 20_000 });
    assert.unreachable('wait returned');
  } catch (e) {
    assert.instance(e, ServerDisconnected);
    assert.match((e as Error).message, /node 1 .* (died|left the mesh) with 1 call/);
  }
  assert.throws(() => FluxNode.join(caller.name, 1), /already joined/);
  caller.close();
});

test('a client SIGKILLed asleep in a wait: once its id is released, its sleeper count is clear, so the next owner pays no futex wake per reply (delegationrpc and ipc)', async () => {
  for (const kind of ['dlg', 'ipc'] as const) {
    const dlg = kind === 'dlg' ? DelegationServer.create({ maxClients: 1, ringDepth: 8, respDepth: 2, requestBytes: 8, responseBytes: 8, reapIntervalMs: 20 }) : undefined;
    const ipc = kind === 'ipc' ? IpcServer.create({ maxClients: 1, depth: 2, requestBytes: 8, responseBytes: 8, reapIntervalMs: 20 }) : undefined;
    const name = (dlg ?? ipc)!.name;
    const i32 = (dlg ?? ipc) as unknown as { i32: Int32Array };
    const p = start('processes', { role: `${kind}-sleep`, name });
    const called = await p.next('called');
    assert.is(called.event, 'called', JSON.stringify(called));
    const c = called.clientId as number;
    const word = dlg ? clientWord(dlg.layout, c) + CLIENT.SLEEPING : (clientBlock(ipc!.layout, c) >> 2) + ICLI.SLEEPING;
    // Take its request, so that its id is released only through an answer to a dead client.
    let taken: { clientId: number; slot: number } | undefined;
    const end = performance.now() + 30_000;
    while (!taken && performance.now() < end) {
      if (dlg) {
        if (dlg.poll() > 0) {
          const e = dlg.recv()!;
          taken = { clientId: e.clientId, slot: e.respSlot };
          dlg.advanceTail();
        }
      } else {
        const r = ipc!.recv();
        if (r) taken = { clientId: r.clientId, slot: r.tag };
      }
      if (!taken) await sleep(1);
    }
    assert.ok(taken, 'the request arrived');
    while (Atomics.load(i32.i32, word) === 0 && performance.now() < end) await sleep(2);
    assert.is(Atomics.load(i32.i32, word), 1, 'the client sleeps in its wait');
    await p.kill();
    // The server notices the death (reaping), then the answer owed releases the id.
    const attached = () => (dlg ? dlg.stats.clientsReaped : ipc!.stats.clientsReaped) > 0;
    while (!attached() && performance.now() < end) {
      // A busy server reaps every so many polls (and at most every reapIntervalMs).
      for (let k = 0; k < 2048; k++) {
        if (dlg) dlg.poll();
        else ipc!.recv();
      }
      await sleep(2);
    }
    assert.ok(attached(), 'the dead client was reaped');
    if (dlg) dlg.reply(taken!.clientId, taken!.slot, new Uint8Array(8));
    else ipc!.reply(taken!.clientId, taken!.slot, new Uint8Array(8));
    assert.is(Atomics.load(i32.i32, word), 0, `${kind}: the dead sleeper was taken off the count at release`);
    const next = dlg ? DelegationClient.connect(name) : IpcClient.connect(name);
    assert.is(next.clientId, c, 'the id went to its next owner');
    next.close();
    (dlg ?? ipc)!.close();
  }
});

test.run();

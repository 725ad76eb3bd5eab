/**
 * `weft bench nic` measures plain libfabric with fi_pingpong in the same run. Its server is
 * ended by the harness; with SIGKILL alone it left its libfabric shm regions (16 MiB each) in
 * /dev/shm on every run. Runs the shm provider once and checks that no region of a process
 * that is gone remains. Skips (saying why) without libfabric-bin.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { fiPingPong, haveFiPingPong } from '../../bench/lib/fi-pingpong.js';
import { listFabricSegments } from '../../src/host/fabric-segments.js';
import { native } from '../../src/native/binding.js';

const orphans = () => listFabricSegments().filter((s) => !native.processAlive(s.pid)).map((s) => s.name);

if (!haveFiPingPong()) {
  console.log('skipped: fi_pingpong is not installed (Debian package libfabric-bin)');
} else {
  test('a fi_pingpong run over shm leaves no libfabric region behind', async () => {
    const before = new Set(orphans());
    const r = await fiPingPong('shm', 64, 200);
    assert.ok(r && r.rttUs > 0, `fi_pingpong gave no result: ${JSON.stringify(r)}`);
    const left = orphans().filter((n) => !before.has(n));
    assert.equal(left, [], `regions left in /dev/shm: ${left.join(', ')}`);
  });
}

test.run();

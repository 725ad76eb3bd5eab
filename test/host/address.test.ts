/**
 * Which address a rank's fabric endpoint binds (src/host/address.ts), on this machine's real
 * interfaces: WEFT_ADDR (checked against the host's addresses), WEFT_IFACE over FI_TCP_IFACE,
 * the route toward the store's host, the default route. The emulated-hosts tests
 * (test/hosts/hosts.test.ts) cover what peers on other hosts then reach.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readFileSync } from 'node:fs';
import { networkInterfaces } from 'node:os';
import { fabricBindAddress, storeHost } from '../../src/host/address.js';

const own = Object.values(networkInterfaces()).flatMap((l) => l ?? []);
const loopbackIface = Object.entries(networkInterfaces()).find(([, l]) => l?.some((a) => a.address === '127.0.0.1'))?.[0];
const external = own.find((a) => a.family === 'IPv4' && !a.internal);
/** The kernel's IPv4 routing table has a default route (destination 0.0.0.0). */
const hasDefaultRoute = (() => {
  try {
    return readFileSync('/proc/net/route', 'utf8').split('\n').slice(1).some((l) => l.split('\t')[1] === '00000000');
  } catch {
    return false;
  }
})();

async function code(p: Promise<unknown>): Promise<string> {
  return p.then(() => 'resolved', (e: { code?: string; message: string }) => `${e.code}: ${e.message}`);
}

test('WEFT_ADDR: one of this host\'s addresses is taken as given; another host\'s or a non-address is refused, naming this host\'s addresses', async () => {
  assert.equal(await fabricBindAddress({ env: { WEFT_ADDR: '127.0.0.1' } }), { address: '127.0.0.1', why: 'WEFT_ADDR' });
  const foreign = await code(fabricBindAddress({ env: { WEFT_ADDR: '198.51.100.7' } }));
  assert.match(foreign, /^EINVAL: WEFT_ADDR=198\.51\.100\.7 is not an address of this host \(its addresses: .*127\.0\.0\.1/);
  assert.match(foreign, /--iface/);
  assert.match(await code(fabricBindAddress({ env: { WEFT_ADDR: 'node7' } })), /^EINVAL: WEFT_ADDR=node7 is not an IP address/);
  // IPv6 in another spelling (upper case, uncompressed) and with a zone is the same address.
  if (own.some((a) => a.address === '::1')) {
    assert.is((await fabricBindAddress({ env: { WEFT_ADDR: '0:0:0:0:0:0:0:1' } })).address, '0:0:0:0:0:0:0:1');
    assert.is((await fabricBindAddress({ env: { WEFT_ADDR: '::1%lo' } })).why, 'WEFT_ADDR');
  }
});

test('WEFT_IFACE names an interface; it wins over libfabric\'s FI_TCP_IFACE, which is respected alone; a missing one lists the interfaces', async () => {
  if (!loopbackIface) return void console.log('address.test: no interface holds 127.0.0.1; interface cases skipped');
  assert.equal(await fabricBindAddress({ env: { WEFT_IFACE: loopbackIface } }), { address: '127.0.0.1', why: `interface ${loopbackIface} (WEFT_IFACE)` });
  assert.equal(await fabricBindAddress({ env: { FI_TCP_IFACE: loopbackIface } }), { address: '127.0.0.1', why: `interface ${loopbackIface} (FI_TCP_IFACE)` });
  const missing = await code(fabricBindAddress({ env: { WEFT_IFACE: 'nope0', FI_TCP_IFACE: loopbackIface } }));
  assert.match(missing, new RegExp(`^EINVAL: WEFT_IFACE=nope0: no such interface on this host \\(interfaces: .*${loopbackIface}`));
  if (external) {
    const ext = Object.entries(networkInterfaces()).find(([, l]) => l?.some((a) => a.address === external.address))![0];
    assert.is((await fabricBindAddress({ env: { WEFT_IFACE: ext, FI_TCP_IFACE: loopbackIface } })).address, external.address);
  }
});

test('without overrides: the route toward the store\'s host, else the default route; always an address of this host', async () => {
  if (external) {
    // A store on this host's own external address: the kernel routes to it from that address.
    const c = await fabricBindAddress({ env: {}, storeUrl: `redis://${external.address}:6379` });
    assert.equal(c, { address: external.address, why: `the route toward the store's host ${external.address}` });
  }
  for (const storeUrl of ['redis://127.0.0.1:6379', 'file:///tmp/weft-store', undefined]) {
    const c = await fabricBindAddress({ env: {}, storeUrl });
    assert.ok(own.some((a) => a.address === c.address), `${storeUrl}: ${c.address} is not an address of this host`);
    // With a default route the store-less and local-store cases bind its source, whatever
    // this host's network is (a VM on 192.0.2.0/24 once fell back to 127.0.0.1).
    if (hasDefaultRoute) assert.equal(c.why, 'the default route', `${storeUrl}: ${c.address}`);
    else assert.is(c.address, '127.0.0.1', `${storeUrl}: ${c.why}`);
  }
  assert.is(storeHost('redis://:pw@[::1]:6379'), '::1');
  assert.is(storeHost('file:///tmp/x'), undefined);
  assert.is(storeHost('not a url'), undefined);
});

test.run();

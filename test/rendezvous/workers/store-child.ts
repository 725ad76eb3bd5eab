/**
 * Child process of the store tests: `store-child.js <store url> <op> ...args`. Reports
 * results with process.send and exits 0, or prints the error and exits 1.
 *   add <key> <times>            adds 1 to the counter <times> times
 *   set <key> <value> <delayMs>  sets the key after a delay
 *   get <key> <timeoutMs>        waits for the key and sends its value as a string
 *   serve                        hosts a TcpStoreServer on loopback (secret: WEFT_STORE_SECRET),
 *                                sends its url and serves until killed (the url argument is unused)
 */
import { openStore } from '../../../src/rendezvous/open.js';
import { TcpStoreServer } from '../../../src/rendezvous/stores/tcp/server.js';

const [url, op, ...args] = process.argv.slice(2);
const send = (m: unknown) => new Promise<void>((r) => (process.send ? process.send(m, () => r()) : r()));

if (op === 'serve') {
  const server = await TcpStoreServer.listen({ log: () => {}, secret: process.env.WEFT_STORE_SECRET });
  await send({ url: server.url });
  setInterval(() => {}, 1 << 30);
} else try {
  const store = await openStore(url, { timeoutMs: 20_000 });
  if (op === 'add') {
    let last = 0;
    for (let i = 0, n = Number(args[1]); i < n; i++) last = await store.add(args[0], 1);
    await send({ last });
  } else if (op === 'set') {
    await new Promise((r) => setTimeout(r, Number(args[2])));
    await store.set(args[0], new TextEncoder().encode(args[1]));
    await send({ set: true });
  } else if (op === 'get') {
    await send({ ready: true });
    const v = await store.get(args[0], { timeoutMs: Number(args[1]) });
    await send({ value: new TextDecoder().decode(v) });
  } else {
    throw new Error(`unknown op ${op}`);
  }
  await store.close();
  process.exit(0);
} catch (err) {
  console.error(`store-child ${op}:`, err);
  process.exit(1);
}

// A rank for the launcher test of the store secret: the launcher-hosted TcpStore's secret is
// in this rank's environment and nowhere on its command line; a client without it is refused.
import { readFileSync } from 'node:fs';
import { TcpStore } from '../../../dist/src/index.js';

const { WEFT_STORE: url, WEFT_STORE_SECRET: secret } = process.env;
const fail = (why) => {
  console.error(`secret-rank: ${why}`);
  process.exit(1);
};
if (!/^[0-9a-f]{64}$/.test(secret ?? '')) fail(`WEFT_STORE_SECRET is not 32 random bytes in hex: ${secret === undefined ? 'unset' : 'malformed'}`);
if (!url?.startsWith('tcp://')) fail(`WEFT_STORE is ${url}`);
const cmdline = readFileSync('/proc/self/cmdline', 'utf8');
if (cmdline.includes(secret)) fail('the secret is on the command line');
try {
  await TcpStore.connect(url, { secret: null, timeoutMs: 20_000 });
  fail('a client without the secret was let in');
} catch (e) {
  if (e.code !== 'EINVAL' || !/requires a secret/.test(e.message)) fail(`unexpected error without the secret: ${e.message}`);
}
const store = await TcpStore.connect(url, { timeoutMs: 20_000 }); // the secret from the environment
await store.set(`seen/${process.env.WEFT_RANK}`, new TextEncoder().encode('1'));
await store.close();
console.log(`ok rank ${process.env.WEFT_RANK} store secret`);

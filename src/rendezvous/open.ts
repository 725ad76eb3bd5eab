/**
 * openStore: one URL picks the rendezvous backend, so launchers and ranks configure it with
 * a single string (WEFT_STORE).
 *
 * | URL                                      | Store                                               |
 * |------------------------------------------|-----------------------------------------------------|
 * | `tcp://host:port`                        | TcpStore: client of a TcpStoreServer (the default)  |
 * | `redis://[user:pass@]host[:port][/db]`   | RedisStore (`rediss://` for TLS)                    |
 * | `file:///shared/dir`                     | FileStore on a directory every rank sees            |
 *
 * Any of them takes `?prefix=<job id>` to wrap the store in a PrefixStore.
 *
 * Who hosts the TcpStoreServer: the launcher when there is one (it starts the server and
 * passes `tcp://<its host>:<port>` to every rank), otherwise rank 0, with
 * `openStore(url, { serve: true })`: rank 0 listens on the URL's port and connects to itself;
 * the other ranks just connect (retrying until rank 0 listens, within the timeout). A rank 0
 * asked to serve on an address other than loopback without a secret refuses.
 *
 * Credentials never go in a URL (URLs end up on command lines, which every local user can
 * read): a TcpStore's secret comes from WEFT_STORE_SECRET or WEFT_STORE_SECRET_FILE (or
 * `tcp.secret`), a Redis password from WEFT_STORE_PASSWORD or WEFT_STORE_PASSWORD_FILE when
 * the URL has none. A rank 0 that serves on loopback without any secret (torchrun-style
 * MASTER_ADDR=127.0.0.1 with WEFT_STORE_SECRET unset) serves a store open to this host's users
 * and says so with a process warning; on any other address it refuses.
 */
import { fileURLToPath } from 'node:url';
import { WeftError } from '../errors.js';
import { credentialFromEnv } from './stores/shared/secrets.js';
import type { WaitOptions } from '../util/deadline.js';
import { FileStore, type FileStoreOptions } from './stores/file/store.js';
import { PrefixStore } from './prefix-store.js';
import { RedisStore, redactUrl, type RedisStoreOptions } from './stores/redis/store.js';
import type { Store } from './store.js';
import { TcpStoreServer } from './stores/tcp/server.js';
import { parseTcpUrl, TcpStore, type TcpStoreOptions } from './stores/tcp/store.js';

export interface OpenStoreOptions extends WaitOptions {
  /** tcp:// only: host the TcpStoreServer in this process (rank 0) on the URL's host and port. */
  serve?: boolean;
  /** tcp:// with `serve`: the interface to listen on (default: the URL's host; '0.0.0.0' for all). */
  listenHost?: string;
  redis?: Omit<RedisStoreOptions, keyof WaitOptions>;
  tcp?: Omit<TcpStoreOptions, keyof WaitOptions>;
  file?: FileStoreOptions;
}

/**
 * Opens the store a URL names (default: the WEFT_STORE environment variable), waiting
 * for it within `timeoutMs`.
 *
 * @example
 * // rank 0                                            // every other rank
 * const s = await openStore('tcp://node0:29500', { serve: rank === 0 });
 * // the password from WEFT_STORE_PASSWORD(_FILE), not the URL:
 * const job = await openStore('redis://redis:6379/0?prefix=job-42');
 */
export async function openStore(url: string | undefined = process.env.WEFT_STORE, options: OpenStoreOptions = {}): Promise<Store> {
  if (!url) throw new WeftError('EINVAL', 'openStore: no store URL given and WEFT_STORE is not set; pass tcp://host:port, redis://host:port or file:///dir');
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new WeftError('EINVAL', `openStore: '${redactUrl(url)}' is not a URL; expected tcp://host:port, redis://host:port/db or file:///dir`);
  }
  // Our own parameter; the rest of the query goes to the backend (ioredis reads some).
  const prefix = parsed.searchParams.get('prefix');
  parsed.searchParams.delete('prefix');
  const bare = parsed.toString();
  const wait: WaitOptions = { timeoutMs: options.timeoutMs, signal: options.signal };
  let store: Store;
  switch (parsed.protocol) {
    case 'redis:':
    case 'rediss:':
      store = await RedisStore.connect(bare, { ...options.redis, ...wait });
      break;
    case 'tcp:':
      store = await openTcp(bare, options, wait);
      break;
    case 'file:':
      store = new FileStore(fileURLToPath(bare), options.file);
      break;
    default:
      throw new WeftError('EINVAL', `openStore: unsupported scheme '${parsed.protocol}' in ${redactUrl(url)}; use tcp://, redis://, rediss:// or file://`);
  }
  return prefix ? new PrefixStore(prefix, store) : store;
}

async function openTcp(url: string, options: OpenStoreOptions, wait: WaitOptions): Promise<Store> {
  if (!options.serve) return TcpStore.connect(url, { ...options.tcp, ...wait });
  const { host, port } = parseTcpUrl(url, true);
  // The other ranks cannot learn a secret we make up: use the job's (option or environment),
  // or serve openly, and say so.
  const secret = options.tcp?.secret !== undefined ? options.tcp.secret : (credentialFromEnv('WEFT_STORE_SECRET', 'openStore')?.value ?? null);
  const listenHost = options.listenHost ?? host;
  // Open to this host's users at most: a store other hosts reach must be the job's alone.
  if (secret === null && !isLoopbackHost(listenHost)) {
    throw new WeftError('EINVAL', `openStore: this process would host the TcpStore on ${listenHost}:${port}, an address other hosts reach, without a secret: anyone on the network could read and change the job's keys. Set WEFT_STORE_SECRET (or WEFT_STORE_SECRET_FILE) to the same random value in every rank's environment, e.g. from \`openssl rand -hex 32\``);
  }
  const server = await TcpStoreServer.listen({ host: listenHost, port, secret });
  if (secret === null) {
    process.emitWarning(`weft: this process hosts the TcpStore at ${server.url} without a secret: any process that reaches the port can read, change and delete the job's keys. Set WEFT_STORE_SECRET (the same random value, e.g. from \`openssl rand -hex 32\`) in every rank's environment.`, { code: 'WEFT_STORE_WITHOUT_SECRET' });
  }
  try {
    return await TcpStore.connect(server.url, { ...options.tcp, ...wait, server, secret });
  } catch (err) {
    await server.close();
    throw err;
  }
}

function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '');
  return h === 'localhost' || h.startsWith('127.') || h === '::1';
}

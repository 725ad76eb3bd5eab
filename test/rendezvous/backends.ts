/**
 * The three store backends the rendezvous tests run against: the runner's real
 * redis-server (WEFT_TEST_REDIS_URL, password-protected), a temp directory, and a
 * TcpStoreServer started in the test process, with a secret that this process and its
 * children get in WEFT_STORE_SECRET, as `weft run` gives its ranks. Each test opens its
 * stores under a fresh prefix, through openStore, as a rank would.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { openStore, type OpenStoreOptions } from '../../src/rendezvous/open.js';
import { TcpStoreServer } from '../../src/rendezvous/stores/tcp/server.js';
import * as assert from 'uvu/assert';
import { WeftError } from '../../src/errors.js';
import type { CloseOptions, Store, StoreStats } from '../../src/rendezvous/store.js';

/** Strings as store values and back. */
export const enc = (s: string) => new TextEncoder().encode(s);
export const dec = (b: Uint8Array) => new TextDecoder().decode(b);

/** The WeftError `p` rejects with (fails the test when it resolves or throws something else). */
export async function failure(p: Promise<unknown>): Promise<WeftError> {
  try {
    await p;
  } catch (e) {
    assert.instance(e, WeftError);
    return e as WeftError;
  }
  throw new Error('expected a failure');
}

export type StatStore = Store & { stats: StoreStats; close(options?: CloseOptions): Promise<void> };

export interface Backend {
  name: 'redis' | 'file' | 'tcp';
  /** Base URL, without prefix. */
  url: string;
  /** `url` with `?prefix=<prefix>`: what a rank would get in WEFT_STORE. */
  urlFor(prefix: string): string;
  open(prefix: string, options?: OpenStoreOptions): Promise<StatStore>;
  close(): Promise<void>;
}

export function redisUrl(): string {
  const url = process.env.WEFT_TEST_REDIS_URL;
  if (!url) throw new Error('WEFT_TEST_REDIS_URL is not set: run the tests with node scripts/run-tests.mjs, which starts redis-server');
  return url;
}

function withPrefix(url: string, prefix: string): string {
  const u = new URL(url);
  u.searchParams.set('prefix', prefix);
  return u.toString();
}

function backend(name: Backend['name'], url: string, close: () => Promise<void>): Backend {
  return {
    name,
    url,
    urlFor: (prefix) => withPrefix(url, prefix),
    open: (prefix, options) => openStore(withPrefix(url, prefix), options) as Promise<StatStore>,
    close,
  };
}

export async function startBackends(): Promise<Backend[]> {
  // First: without Redis the suite stops here, before a listening server keeps the process alive.
  const redis = redisUrl();
  const dir = mkdtempSync(path.join(tmpdir(), 'weft-filestore-'));
  const server = await TcpStoreServer.listen({ log: () => {}, secret: randomBytes(32).toString('hex') });
  process.env.WEFT_STORE_SECRET = server.secret as string;
  delete process.env.WEFT_STORE_SECRET_FILE;
  return [
    backend('redis', redis, async () => {}),
    backend('file', pathToFileURL(dir).toString(), async () => rmSync(dir, { recursive: true, force: true })),
    backend('tcp', server.url, () => server.close()),
  ];
}

let unique = 0;
/** A prefix no other test (or earlier run against the same Redis) uses. */
export function freshPrefix(tag: string): string {
  return `${tag}-${process.pid}-${Date.now().toString(36)}-${unique++}`;
}

const CHILD = path.join(path.dirname(fileURLToPath(import.meta.url)), 'workers', 'store-child.js');

export interface ChildResult {
  code: number | null;
  messages: unknown[];
}

/** Runs test/rendezvous/workers/store-child.ts in a real child process: `store-child.js <url> <op> ...args`. */
export function runChild(url: string, op: string, ...args: string[]): Promise<ChildResult> & { child: ReturnType<typeof fork> } {
  const child = fork(CHILD, [url, op, ...args], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const messages: unknown[] = [];
  child.on('message', (m) => messages.push(m));
  const done = new Promise<ChildResult>((resolve, reject) => {
    child.on('error', reject);
    child.on('exit', (code) => resolve({ code, messages }));
  });
  return Object.assign(done, { child });
}

/**
 * Loads the native core (build/Release/weft.node) and types its surface. Everything native
 * goes through this module, so the rest of the code never touches `require`.
 */
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

export type FutexResult = 'ok' | 'not-equal' | 'timed-out' | 'error';

/** The libfabric part of the addon; `available` is false when built without libfabric. */
export interface OfiBinding {
  available: boolean;
  /** Why ofi is missing, when it is. */
  reason?: string;
  [key: string]: unknown;
}

export interface NativeBinding {
  shmCreate(name: string, size: number): SharedArrayBuffer;
  shmOpen(name: string): SharedArrayBuffer;
  shmUnlink(name: string): boolean;
  memcpyBandwidth(bytes: number, iterations: number, slots?: number): number;
  copyBytes(dst: Uint8Array, dstOffset: number, src: Uint8Array, srcOffset: number, length: number): void;
  futexWake(word: Int32Array, index: number, count?: number): number;
  futexWait(word: Int32Array, index: number, expected: number, timeoutMs: number): FutexResult;
  futexWaitAsync(word: Int32Array, index: number, expected: number, timeoutMs: number): Promise<FutexResult>;
  processStartTime(pid: number): number;
  processAlive(pid: number, startTime?: number): boolean;
  yieldThread(): void;
  ofi: OfiBinding;
}

/** Root of the package (the folder holding package.json). */
export const packageRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

function load(): NativeBinding {
  const require = createRequire(import.meta.url);
  const candidates = [
    path.join(packageRoot, 'build', 'Release', 'weft.node'),
    path.join(packageRoot, 'build', 'Debug', 'weft.node'),
  ];
  let lastError: unknown;
  for (const file of candidates) {
    try {
      return require(file) as NativeBinding;
    } catch (err) {
      lastError = err;
    }
  }
  throw new Error(`weft: the native core is not built (looked in ${candidates.join(', ')}); run \`npm install\` or \`npx node-gyp rebuild\` in ${packageRoot}`, { cause: lastError });
}

/** The loaded native core. */
export const native: NativeBinding = load();

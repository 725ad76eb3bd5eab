/**
 * Loads the native core (build/Release/weft.node) and types its surface. Everything native
 * goes through this module, so the rest of the code never touches `require`.
 */
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

export type FutexResult = 'ok' | 'not-equal' | 'timed-out' | 'error';

/** What the provider behind an OfiEndpoint offers (from fi_getinfo). */
export interface OfiEndpointAttrs {
  provider: string;
  fabric: string;
  domain: string;
  mrMode: number;
  mrVirtAddr: boolean;
  mrProvKey: boolean;
  mrLocal: boolean;
  mrEndpoint: boolean;
  mrKeySize: number;
  cqDataSize: number;
  /** FI_ORDER_* bits of tx_attr.msg_order. */
  msgOrder: number;
  txSize: number;
  injectSize: number;
  maxMsgSize: number;
  /** Completions carry the source fi_addr (FI_SOURCE). */
  source: boolean;
  /** The CQ has a wait fd (waitAsync works). */
  waitFd: boolean;
  waitObject: 'fd' | 'none';
}

/**
 * One libfabric RDM endpoint with its fabric, domain, address vector and completion queue.
 * Commands (16 u32 each) and completions (8 u32 each) go through caller-owned Uint32Arrays
 * bound once; layouts in src/nic/ofi/layout.ts.
 */
export interface OfiEndpoint {
  /** fi_getname bytes. */
  readonly address: Uint8Array;
  readonly attrs: OfiEndpointAttrs;
  avInsert(address: Uint8Array): number;
  avRemove(fiAddr: number): void;
  /** Registers memory in place (kept alive until deregMr); `key` is used when the provider does not pick keys. */
  regMr(view: ArrayBuffer | ArrayBufferView, requestedKey?: bigint): { handle: number; key: bigint; base: bigint };
  deregMr(handle: number): void;
  bindCommands(words: Uint32Array): void;
  bindCompletions(words: Uint32Array): void;
  /** Posts the first n bound commands; returns how many were accepted (stops at EAGAIN or a failed post). */
  submit(n: number): number;
  /** Reads up to max completions into the bound array; returns the count. */
  poll(max: number): number;
  /** Text of error entry `aux` of the last poll. */
  errorText(aux: number): string;
  strerror(code: number): string;
  /** Blocks until the CQ may have entries (true) or timeoutMs passes (false). */
  waitSync(timeoutMs: number): boolean;
  /** Same on the event loop (providers with a wait fd only). */
  waitAsync(timeoutMs: number): Promise<boolean>;
  close(): void;
}

/** The libfabric part of the addon; `available` is false when built without libfabric. */
export interface OfiBinding {
  available: boolean;
  /** Why ofi is missing, when it is. */
  reason?: string;
  /** libfabric version, e.g. "1.17.0". */
  version?: string;
  /** Providers offering RDM endpoints with RMA on this machine. */
  providers?(): string[];
  Endpoint?: new (provider: string, node?: string | null, options?: { source?: boolean; cqSize?: number }) => OfiEndpoint;
}

/** A SIMD level the reduction kernels were compiled for ('generic' off x86-64). */
export type ReduceIsa = 'sse2' | 'avx2' | 'avx512' | 'generic';

/** The reduction code tables as the addon numbers them (checked by src/reduce/codes.ts). */
export interface ReduceCodeTable {
  ops: string[];
  dtypes: string[];
  elementSizes: number[];
  isFloat: boolean[];
  maxSources: number;
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
  /** Pins the calling thread to one CPU (sched_setaffinity); false if refused. */
  bindToCpu(cpu: number): boolean;
  /**
   * dst[i] = a[i] op b[i] for i < count, each view read from its byteOffset. dst may be a or b
   * exactly, never a partial overlap. Throws TypeError/RangeError (code EINVAL/ERANGE).
   */
  reduce(op: number, dtype: number, count: number, dst: ArrayBufferView, a: ArrayBufferView, b: ArrayBufferView): void;
  /**
   * dst = srcs[0] op srcs[1] op ... in one blocked pass; dst may be srcs[0] or srcs[1] exactly.
   * The sources come as one array or spread as trailing arguments (faster: N-API reads array
   * elements one lookup at a time).
   */
  reduceMany(op: number, dtype: number, count: number, dst: ArrayBufferView, srcs: readonly ArrayBufferView[]): void;
  reduceMany(op: number, dtype: number, count: number, dst: ArrayBufferView, ...srcs: ArrayBufferView[]): void;
  /** The level chosen at load (WEFT_REDUCE_ISA may force a lower one). */
  reduceIsa(): ReduceIsa;
  /** The levels this CPU runs, lowest first. */
  reduceIsas(): ReduceIsa[];
  reduceCodes(): ReduceCodeTable;
  /** Seconds for `iterations` in-place kernel runs over private buffers (benchmarks only). */
  reduceKernelSeconds(op: number, dtype: number, count: number, iterations: number): number;
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

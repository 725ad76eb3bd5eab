/**
 * Loads the native core (weft.node: built here, or the package's prebuilt binary) and types its surface. Everything native
 * goes through this module, so the rest of the code never touches `require`.
 *
 * The fabric is a second addon (weft_ofi.node, which opens libfabric.so.1 when it loads),
 * loaded on the first read of `native.ofi`: a process on shared memory never maps libfabric. Where it is loaded,
 * libinfinipath (which Debian's libfabric pulls in) must not take over the process's signals
 * or write backtrace files into the working directory: see loadOfi.
 */
import { createRequire } from 'node:module';
import { existsSync } from 'node:fs';
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
  /** Closes a registration; `keepMemory`: the provider may still use it, so it stays open, with its memory, until close(). */
  deregMr(handle: number, keepMemory?: boolean): void;
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
  /** False while the CQ has entries or the provider has work to progress (fi_trywait). */
  mayBlock(): boolean;
  /**
   * Until the CQ's wait fd next becomes readable: then adds 1 to `words[index]` (a futex in
   * shared memory) and wakes its waiters, from a helper thread. Call after mayBlock() said
   * true. False without a wait fd (the caller sleeps in short slices instead).
   */
  ringOnActivity(words: Int32Array, index: number): boolean;
  /** How many times the helper thread of ringOnActivity has rung (tests). */
  relayRings(): number;
  close(): void;
}

/** The libfabric part of the addon; `available` is false without libfabric (or built without its headers), and `reason` says which. */
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
  /** Unlinks `name` when this thread's Node environment ends (a terminated worker too); false takes it back. */
  shmUnlinkAtExit(name: string, yes: boolean): void;
  memcpyBandwidth(bytes: number, iterations: number, slots?: number): number;
  copyBytes(dst: Uint8Array, dstOffset: number, src: Uint8Array, srcOffset: number, length: number): void;
  futexWake(word: Int32Array, index: number, count?: number): number;
  futexWait(word: Int32Array, index: number, expected: number, timeoutMs: number): FutexResult;
  futexWaitAsync(word: Int32Array, index: number, expected: number, timeoutMs: number): Promise<FutexResult>;
  /** Registers this process for global expedited membarriers (once); false where the kernel or a seccomp filter refuses. */
  membarrierRegister(): boolean;
  /** A full memory barrier on every running thread of every registered process (membarrier(2)); false if the call failed. */
  membarrierGlobal(): boolean;
  processStartTime(pid: number): number;
  processAlive(pid: number, startTime?: number): boolean;
  /**
   * Starts a thread that ends this process (after unlinking its shared memory) graceMs after
   * process `pid` (started at `startTime`, -1: any) is gone; false if already watching.
   */
  watchLauncher(pid: number, startTime: number, graceMs: number): boolean;
  /** The state letter of /proc/<pid>/stat ('T': stopped), '' when gone or a recycled pid. */
  processState(pid: number, startTime?: number): string;
  /** [pid, tid, start time in clock ticks] of the calling thread. */
  threadIdentity(): [number, number, number];
  /** That thread of that process still runs (not exited, not a recycled tid). */
  threadAlive(pid: number, tid: number, startTime: number): boolean;
  yieldThread(): void;
  /** Pins the calling thread to one CPU (sched_setaffinity); false if refused. */
  bindToCpu(cpu: number): boolean;
  /** Calls fn and puts back every signal disposition it changed (sigaction). */
  keepSignalHandlers<T>(fn: () => T): T;
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
  /** The fabric addon, loaded on first read (see loadOfi). */
  readonly ofi: OfiBinding;
}

/** Root of the package (the folder holding package.json). */
export const packageRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

const require = createRequire(import.meta.url);

/** Where the loaded core came from: compiled on this machine, or a prebuilt binary of the package. */
export interface NativeOrigin {
  kind: 'built' | 'prebuilt';
  /** The folder holding weft.node (and weft_ofi.node beside it, when there is one). */
  dir: string;
}

/** The C library this Node runs on: prebuilt binaries are for glibc only. */
function libc(): 'glibc' | 'musl' {
  const header = (process.report?.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined)?.header;
  return header?.glibcVersionRuntime ? 'glibc' : 'musl';
}

/** The folder of this platform's prebuilt binaries (scripts/prebuild.mjs makes them). */
export const prebuiltDir = path.join(packageRoot, 'prebuilds', `${process.platform}-${process.arch}`);

/**
 * Where weft.node may be, in order: a build on this machine first (node-gyp at install, or
 * `npm rebuild --build-from-source`), as node-gyp-build does, then the prebuilt binary. The
 * C library is asked for only when it comes to that: a diagnostic report costs about 10 ms of
 * every process's start.
 */
function* candidates(): Generator<NativeOrigin> {
  for (const b of ['Release', 'Debug']) yield { kind: 'built', dir: path.join(packageRoot, 'build', b) };
  if (libc() === 'glibc') yield { kind: 'prebuilt', dir: prebuiltDir };
}

let origin: NativeOrigin | undefined;

/** Where the loaded native core came from. */
export function nativeOrigin(): NativeOrigin {
  return origin!;
}

function load(): NativeBinding {
  const tried: string[] = [];
  let lastError: unknown;
  for (const c of candidates()) {
    const file = path.join(c.dir, 'weft.node');
    if (!existsSync(file)) continue;
    try {
      const core = require(file) as NativeBinding;
      origin = c;
      return core;
    } catch (err) {
      tried.push(`${file}: ${(err as Error).message.split('\n')[0]}`);
      lastError = err;
    }
  }
  const platform = `${process.platform}-${process.arch}${libc() === 'musl' ? ' (musl)' : ''}`;
  const why = tried.length > 0 ? `none of its binaries loads (${tried.join('; ')})` : `there is no prebuilt binary for ${platform} and none was built at install`;
  throw new Error(
    `weft: the native core is missing: ${why}. Build it: \`npm rebuild weftjs --build-from-source\` (needs python3, make and g++); ` +
      'pnpm runs no build scripts unless allowed (`pnpm approve-builds`)',
    { cause: lastError },
  );
}

/**
 * Loads weft_ofi.node, from the folder the core came from. It opens libfabric.so.1 itself
 * when it loads (native/fabric_library.h): without libfabric it loads and says why ofi is
 * missing. libinfinipath's constructor (Debian's libfabric pulls it in) installs signal
 * handlers that call exit() (a SIGTERMed rank then exits 1, skipping its launcher's cleanup,
 * and can deadlock in exit) and, on a crash, writes `<exe>.<host>s-<pid>,vm.btr` files into
 * the working directory; the handlers are put back as they were and IPATH_NO_BACKTRACE turns
 * the files off.
 */
function loadOfi(core: NativeBinding): OfiBinding {
  const file = path.join(origin!.dir, 'weft_ofi.node');
  if (!existsSync(file)) {
    return { available: false, reason: "weft was built without libfabric's headers (none found at install); install libfabric-dev and rebuild (npm rebuild weftjs --build-from-source)" };
  }
  process.env.IPATH_NO_BACKTRACE ??= '1';
  try {
    return core.keepSignalHandlers(() => (require(file) as { ofi: OfiBinding }).ofi);
  } catch (err) {
    return { available: false, reason: `the fabric addon ${file} does not load: ${(err as Error).message}` };
  }
}

function bind(): NativeBinding {
  const core = load();
  let ofi: OfiBinding | undefined;
  Object.defineProperty(core, 'ofi', { get: () => (ofi ??= loadOfi(core)), enumerable: true });
  return core;
}

/** The loaded native core. */
export const native: NativeBinding = bind();

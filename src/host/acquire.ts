/**
 * Whether a plain load of a shared word may stand in for `Atomics.load` on a hot path.
 *
 * Why: V8 in Node 20 compiles `Atomics.load` and `Atomics.store` to calls of builtins, about
 * 18 ns each on this machine, while a plain typed-array load is inlined (under 1 ns). A small
 * request crossing the delegation layer used 13 of them, more time than all its other work.
 *
 * Why it is sound on x86: every load there is an acquire load in hardware (total store
 * order), and a sequentially consistent load is the same plain `mov` inside the builtin; the
 * only difference is the compiler, and TurboFan keeps typed-array loads on the effect chain
 * in program order and does not reuse one across a loop iteration or a call. So on x86 a
 * plain load is what `Atomics.load` does, minus the call. Elsewhere (arm64, where a plain
 * load may pass an earlier store-release) this is false and callers use `Atomics.load`.
 *
 * Where it is used: a load that is not the one a wait spins on (those stay `Atomics.load`, so
 * a loop of polls always has a real synchronizing load), such as the second and later slots of
 * a scan, a sleeper count before a wake-up, or a word that changes once in a long while.
 * Stores that publish data stay `Atomics.store`, except toward a sleeper that fences with
 * membarrier (host/remote-fence.ts): x86 keeps a plain store after the stores before it.
 */
export const PLAIN_LOAD_ACQUIRES = process.arch === 'x64' || process.arch === 'ia32';

/**
 * `view[index]` with acquire order: a plain load where that is one (x86), else `Atomics.load`.
 * Only for the loads listed above; a load a wait spins on stays `Atomics.load`.
 */
export function loadAcquire(view: Int32Array | Uint8Array, index: number): number {
  return PLAIN_LOAD_ACQUIRES ? view[index] : Atomics.load(view, index);
}

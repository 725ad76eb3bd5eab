/**
 * The systems of `weft bench ipc`: name -> module (bench/ipc/systems/<name>.ts, whose default
 * export is an IpcSystem, bench/ipc/system.ts). Loaded on demand in the harness and in every
 * server and client worker/process, so a system's dependencies load only where it runs.
 * A name asked for on the command line but missing here is skipped with one line.
 */
import type { IpcSystem } from '../system.js';

export type SystemModule = { default: IpcSystem };

export const SYSTEMS: Record<string, () => Promise<SystemModule>> = {
  postMessage: () => import('./post-message.js'),
  MessageChannel: () => import('./message-channel.js'),
  'node:net': () => import('./node-net.js'),
  floor: () => import('./floor.js'),
  delegation: () => import('./delegation.js'),
  ipc: () => import('./ipc.js'),
  flux: () => import('./flux.js'),
};

/** Every system the bench knows of, in the order of its table (registered or not). */
export const ALL_SYSTEMS = ['postMessage', 'MessageChannel', 'node:net', 'floor', 'delegation', 'ipc', 'flux'] as const;

/**
 * Loads a system by name, or from `moduleUrl` when given (a module outside the registry,
 * e.g. a test's). Throws when neither names one.
 */
export async function loadSystem(name: string, moduleUrl?: string): Promise<IpcSystem> {
  const load = moduleUrl ? () => import(moduleUrl) as Promise<SystemModule> : SYSTEMS[name];
  if (!load) throw new Error(`${name} is not in bench/ipc/systems/index.ts`);
  const sys = (await load()).default;
  if (!sys || typeof sys.startServer !== 'function' || typeof sys.runClient !== 'function') throw new Error(`${name}: the module's default export is not an IpcSystem`);
  return sys;
}

/**
 * `postMessage`: worker_threads' own channel between a thread and the workers it started.
 * The server is the harness's thread (serverOnMain): it answers each client Worker's
 * messages with worker.postMessage; each client talks through parentPort. Threads only.
 */
import { parentPort } from 'node:worker_threads';
import { whenStopped, type IpcSystem } from '../system.js';
import { echo, portClient } from './port-rpc.js';

const system: IpcSystem = {
  name: 'postMessage',
  placements: ['threads'],
  serverOnMain: true,
  async startServer(_cfg, ctx) {
    if (!ctx?.workers) throw new Error('postMessage: the server runs on the thread that started the clients (serverOnMain)');
    const detach = ctx.workers.map(echo);
    return {
      descriptor: null,
      serve: (stop) => whenStopped(stop),
      close: () => detach.forEach((d) => d()),
    };
  },
  async runClient(_descriptor, _index, cfg, ctx) {
    if (!parentPort) throw new Error('postMessage: a client runs in a worker thread');
    return portClient(parentPort, cfg, ctx);
  },
};

export default system;

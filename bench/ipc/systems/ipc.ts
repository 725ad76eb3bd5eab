/** `ipc`: weft's ipc (a request and a response SPSC ring per client, flat combining). */
import { IpcClient, IpcServer } from '../../../src/delegation/index.js';
import { nextPow2, type IpcSystem } from '../system.js';
import { runCaller } from './weft-caller.js';

const system: IpcSystem = {
  name: 'ipc',
  placements: ['threads', 'processes'],
  async startServer(cfg) {
    const server = IpcServer.create({ maxClients: cfg.clients, depth: nextPow2(cfg.qd), requestBytes: cfg.bytes, responseBytes: cfg.bytes });
    return {
      descriptor: server.name,
      serve(stop) {
        for (let spins = 0; ; spins++) {
          const r = server.recv();
          if (r === null) {
            if ((spins & 1023) === 0 && stop()) return;
            continue;
          }
          server.reply(r.clientId, r.tag, r.payload);
        }
      },
      close: () => server.close(),
    };
  },
  async runClient(descriptor, _index, cfg, ctx) {
    const client = IpcClient.connect<number>(descriptor as string);
    try {
      return await runCaller(client, cfg, ctx);
    } finally {
      client.close();
    }
  },
};
export default system;

/** `delegation`: weft's delegationrpc (one shared MPSC ring, per-client response slots). */
import { DelegationClient, DelegationServer } from '../../../src/delegation/index.js';
import { nextPow2, type IpcSystem } from '../system.js';
import { runCaller } from './weft-caller.js';

const system: IpcSystem = {
  name: 'delegation',
  placements: ['threads', 'processes'],
  async startServer(cfg) {
    const server = DelegationServer.create({ maxClients: cfg.clients, ringDepth: nextPow2(Math.max(1024, cfg.clients * cfg.qd)), respDepth: nextPow2(cfg.qd), requestBytes: cfg.bytes, responseBytes: cfg.bytes });
    return {
      descriptor: server.name,
      serve(stop) {
        for (let spins = 0; ; spins++) {
          if (server.poll() === 0) {
            if ((spins & 1023) === 0 && stop()) return;
            continue;
          }
          for (let e = server.recv(); e !== null; e = server.recv()) server.reply(e.clientId, e.respSlot, e.payload);
          server.advanceTail();
        }
      },
      close: () => server.close(),
    };
  },
  async runClient(descriptor, _index, cfg, ctx) {
    const client = DelegationClient.connect<number>(descriptor as string);
    try {
      return await runCaller(client, cfg, ctx);
    } finally {
      client.close();
    }
  },
};
export default system;

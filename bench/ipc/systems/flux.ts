/** `flux`: weft's Flux mesh; the server is node 0 and client i is node i + 1. */
import { FluxNode } from '../../../src/delegation/index.js';
import { nextPow2, type IpcSystem } from '../system.js';
import { runCaller } from './weft-caller.js';

const system: IpcSystem = {
  name: 'flux',
  placements: ['threads', 'processes'],
  async startServer(cfg) {
    const node = FluxNode.create({ nodes: cfg.clients + 1, capacity: nextPow2(Math.max(cfg.qd, 16)), maxInflight: cfg.qd, payloadBytes: cfg.bytes });
    return {
      descriptor: node.name,
      serve(stop) {
        for (let spins = 0; ; spins++) {
          const r = node.tryRecv();
          if (r === null) {
            if ((spins & 1023) === 0 && stop()) return;
            continue;
          }
          node.reply(r.replyToken, r.payload);
        }
      },
      close: () => node.close(),
    };
  },
  async runClient(descriptor, index, cfg, ctx) {
    const node = FluxNode.join<number>(descriptor as string, index + 1);
    try {
      return await runCaller({ get inFlight() { return node.inFlight; }, call: (p, n) => node.call(0, p, n), poll: (cb) => node.poll(cb) }, cfg, ctx);
    } finally {
      node.close();
    }
  },
};
export default system;

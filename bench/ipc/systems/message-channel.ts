/**
 * `MessageChannel`: client workers talk to a server worker directly, each over its own
 * MessageChannel whose ends the harness transferred to the two workers (`ports`). Threads only.
 */
import { whenStopped, type IpcSystem } from '../system.js';
import { echo, portClient } from './port-rpc.js';

const system: IpcSystem = {
  name: 'MessageChannel',
  placements: ['threads'],
  ports: true,
  async startServer(cfg, ctx) {
    const ports = ctx?.ports;
    if (!ports || ports.length !== cfg.clients) throw new Error('MessageChannel: the harness passes one port per client (ports)');
    const detach = ports.map(echo);
    return {
      descriptor: null,
      serve: (stop) => whenStopped(stop),
      close: () => {
        detach.forEach((d) => d());
        ports.forEach((p) => p.close());
      },
    };
  },
  async runClient(_descriptor, _index, cfg, ctx) {
    const port = ctx?.port;
    if (!port) throw new Error('MessageChannel: the harness passes the client its port (ports)');
    try {
      return await portClient(port, cfg, ctx);
    } finally {
      port.close();
    }
  },
};

export default system;

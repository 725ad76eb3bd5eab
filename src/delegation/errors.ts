/** The errors of the delegation layer that callers tell apart by class. */
import { WeftError } from '../errors.js';

/**
 * The server of a delegationrpc ring, an ipc server or a Flux peer is gone (closed, or its
 * thread or process died): every call and wait of its clients ends with this error.
 */
export class ServerDisconnected extends WeftError {
  constructor(message: string) {
    super('EPEERDEAD', message);
    this.name = 'ServerDisconnected';
  }
}

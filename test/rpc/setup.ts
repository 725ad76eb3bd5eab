/** What the copyrpc tests share: the worker script their ranks run and the providers to cover. */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { native } from '../../src/native/binding.js';

/** test/rpc/workers/worker.js, compiled beside this file. */
export const WORKER = path.join(path.dirname(fileURLToPath(import.meta.url)), 'workers', 'worker.js');

/** shm always; ofi when weft was built with libfabric. */
export const providers: string[] = native.ofi.available ? ['shm', 'ofi'] : ['shm'];

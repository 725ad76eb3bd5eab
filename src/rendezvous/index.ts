/** The rendezvous layer: the Store API, its backends, and connectFullMesh. */
export type { SetOptions, Store } from './store.js';
export type { CloseOptions, StoreStats } from './store.js';
export { PrefixStore, type PrefixStoreOptions, type PurgeableStore } from './prefix-store.js';
export { RedisStore, redactUrl, type RedisStoreOptions } from './stores/redis/store.js';
export { FileStore, type FileStoreOptions } from './stores/file/store.js';
export { TcpStoreServer, type TcpStoreServerOptions } from './stores/tcp/server.js';
export { TcpStore, parseTcpUrl, type TcpStoreOptions } from './stores/tcp/store.js';
export { openStore, type OpenStoreOptions } from './open.js';
export { connectFullMesh, type FullMeshOptions } from './full-mesh.js';

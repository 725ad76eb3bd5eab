/**
 * The subscriber side of RedisStore's notifications: one extra connection per store in
 * pub/sub mode, shared by all of its pending waits. Every write script PUBLISHes the new
 * value on the key's channel, so a waiter gets the value pushed to it the moment it is set.
 */
import type { Redis } from 'ioredis';
import type { StoreStats } from '../../store.js';

type Listener = (value: Buffer) => void;

export class RedisNotifier {
  private sub: Redis | undefined;
  private readonly listeners = new Map<string, Set<Listener>>();
  // SUBSCRIBE replies not yet received, by channel.
  private readonly pending = new Map<string, Promise<void>>();
  // Called after the subscriber (re)connects: notifications sent while it was down are lost,
  // so every waiter re-checks its keys.
  private readonly resync = new Set<() => void>();

  constructor(
    private readonly makeConnection: () => Redis,
    private readonly stats: StoreStats,
  ) {}

  /** Opens the subscriber connection now, so that the first wait does not pay its setup. */
  warm(): void {
    this.connection();
  }

  private connection(): Redis {
    if (!this.sub) {
      const sub = this.makeConnection();
      sub.on('error', () => {}); // reported by the waits' own deadlines and the main connection
      sub.on('messageBuffer', (channel: Buffer, message: Buffer) => {
        for (const l of this.listeners.get(channel.toString()) ?? []) l(message);
      });
      let connectedBefore = false;
      sub.on('ready', () => {
        // A reconnect: the server forgot our subscriptions and we missed what was published
        // meanwhile. Subscribe again to every channel in use, then make every waiter re-check.
        // (Ours rather than ioredis' autoResubscribe, which skips subscriptions that were
        // still in flight when the connection dropped.)
        if (connectedBefore && this.listeners.size) {
          this.stats.commands++;
          sub.subscribe(...this.listeners.keys()).then(() => this.resync.forEach((r) => r()), () => {});
        }
        connectedBefore = true;
      });
      this.sub = sub;
    }
    return this.sub;
  }

  /**
   * Subscribes `onValue` to the channels. `confirmed` resolves once Redis confirmed every
   * subscription (from then on no set can be missed); `stop` unsubscribes.
   */
  listen(channels: string[], onValue: (channel: string, value: Buffer) => void, onResync: () => void): { confirmed: Promise<void>; stop: () => void } {
    const sub = this.connection();
    const added: [string, Listener][] = [];
    const fresh: string[] = [];
    for (const ch of channels) {
      const l: Listener = (v) => onValue(ch, v);
      let set = this.listeners.get(ch);
      if (!set) this.listeners.set(ch, (set = new Set())), fresh.push(ch);
      set.add(l);
      added.push([ch, l]);
    }
    this.resync.add(onResync);
    let stopped = false;
    const stop = () => {
      if (stopped) return;
      stopped = true;
      this.resync.delete(onResync);
      const gone: string[] = [];
      for (const [ch, l] of added) {
        const set = this.listeners.get(ch);
        set?.delete(l);
        if (set && set.size === 0) this.listeners.delete(ch), this.pending.delete(ch), gone.push(ch);
      }
      if (gone.length && sub.status === 'ready') {
        this.stats.commands++;
        sub.unsubscribe(...gone).catch(() => {});
      }
    };
    if (fresh.length) {
      this.stats.commands++;
      this.stats.roundTrips++;
      // SUBSCRIBE only once the connection is ready: sent during ioredis' ready check it
      // would make that check's INFO fail (not allowed in pub/sub mode) and drop the connection.
      const p = this.whenReady(sub)
        .then(() => {
          const still = fresh.filter((ch) => this.listeners.has(ch));
          return still.length ? sub.subscribe(...still) : undefined;
        })
        .then(() => undefined);
      for (const ch of fresh) this.pending.set(ch, p);
      p.then(
        () => fresh.forEach((ch) => this.pending.get(ch) === p && this.pending.delete(ch)),
        () => {},
      );
    }
    // Channels another waiter subscribed a moment ago are confirmed when its SUBSCRIBE is.
    const confirmed = Promise.all(channels.map((ch) => this.pending.get(ch))).then(() => undefined);
    return { confirmed, stop };
  }

  private whenReady(sub: Redis): Promise<void> {
    if (sub.status === 'ready') return Promise.resolve();
    return new Promise((resolve) => sub.once('ready', () => resolve()));
  }

  close(): void {
    this.listeners.clear();
    this.pending.clear();
    this.resync.clear();
    this.sub?.disconnect();
    this.sub = undefined;
  }
}

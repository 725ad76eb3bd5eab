/**
 * Flux: calls and replies among K daemons over an n x n mesh of SPSC rings (section 9 of
 * the design notes: capacity 1024, at most 256 calls in flight per pair by default). A call
 * carries a token the caller gets back with the reply; a request is answered with the
 * reply token tryRecv() hands out. Each ordered pair has a call ring and a reply ring, so
 * poll() (replies) and tryRecv() (requests) never step over each other's messages, and the
 * in-flight bound keeps both from overflowing.
 *
 * @example
 * ```ts
 * import { FluxNode } from 'weftjs/delegation';
 * const node0 = FluxNode.create({ nodes: 2, payloadBytes: 32 }); // this thread is node 0
 * // in another thread or process: const node1 = FluxNode.join(node0.name, 1);
 * node0.call(1, new Uint8Array(32), 'my token');
 * // node 1: for (let r = node1.tryRecv(); r; r = node1.tryRecv()) node1.reply(r.replyToken, r.payload);
 * node0.poll((token, reply, from) => console.log(token, from));
 * ```
 */
import { availableParallelism } from 'node:os';
import { WeftError } from '../errors.js';
import { FutexBell, ringBell } from '../host/futex-bell.js';
import { joinRemoteFences, plainPublishAllowed } from '../host/remote-fence.js';
import type { WaitPlan } from '../host/wait.js';
import { Deadline, type WaitOptions } from '../util/deadline.js';
import { ServerDisconnected } from './errors.js';
import { LivenessProbe } from './server-watch.js';
import { checkFluxGeometry, FH, FNODE, fluxLayoutOf, NODE_ATTACHED, NODE_CLOSED, NODE_FREE, NODE_JOINING, nodeLine, readFluxHeader, ringOffset, writeFluxHeader, type FluxGeometry, type FluxLayout } from './flux-layout.js';
import { OWNER_PID, ownerAlive, ownerLabel, writeOwner } from './owner.js';
import { createLayerSegment, defaultJob, openLayerSegment, removeLayerSegment } from './segment.js';
import { StampedRing } from './stamped-ring.js';
import { Waiter } from './waiter.js';

export interface FluxOptions extends Partial<Omit<FluxGeometry, 'nodes'>> {
  /** Number of daemons (nodes 0..nodes-1). */
  nodes: number;
  job?: string;
}

/**
 * A call taken by tryRecv(). The object is reused by the next tryRecv() (take what you need
 * out of it); its payload view stays valid until reply() for this call, no longer: once the
 * caller has its reply it may send a call that lands in the same slot.
 */
export interface FluxRequest {
  from: number;
  /** Pass to reply(). */
  replyToken: number;
  payload: Uint8Array;
}

/** One daemon's end of a Flux mesh. Not shared between threads. */
export class FluxNode<T = unknown> extends Waiter {
  readonly name: string;
  readonly nodeId: number;
  readonly layout: FluxLayout;
  private readonly i32: Int32Array;
  private readonly owner: boolean;
  private readonly callsOut: StampedRing[] = [];
  private readonly repliesOut: StampedRing[] = [];
  private readonly callsIn: StampedRing[] = [];
  private readonly repliesIn: StampedRing[] = [];
  private readonly callPos: Int32Array;
  private readonly replyPos: Int32Array;
  private readonly callInPos: Int32Array;
  private readonly replyInPos: Int32Array;
  private readonly tokens: (T | undefined)[];
  private readonly busy: Uint8Array;
  private readonly free: Int32Array;
  private readonly freeTop: Int32Array;
  private readonly inflightTo: Int32Array;
  private readonly request: FluxRequest;
  protected readonly bell: FutexBell;
  private inflight = 0;
  private at = 0;
  private closed = false;

  private constructor(name: string, sab: SharedArrayBuffer, layout: FluxLayout, nodeId: number, owner: boolean) {
    super();
    this.name = name;
    this.layout = layout;
    this.nodeId = nodeId;
    this.owner = owner;
    this.i32 = new Int32Array(sab);
    const k = layout.nodes;
    // Node 0 wrote whether sleepers fence (FH.FENCES): then this node's sleeps fence, and it
    // publishes with plain stores where its process registered.
    const fences = Atomics.load(this.i32, FH.FENCES >> 2) === 1;
    const plain = fences && plainPublishAllowed();
    for (let j = 0; j < k; j++) {
      const ring = (from: number, to: number, kind: 0 | 1) => new StampedRing(this.i32, ringOffset(layout, from, to, kind), layout.capacity, layout.slot, layout.payloadBytes, from === nodeId && plain);
      this.callsOut.push(ring(nodeId, j, 0));
      this.repliesOut.push(ring(nodeId, j, 1));
      this.callsIn.push(ring(j, nodeId, 0));
      this.repliesIn.push(ring(j, nodeId, 1));
    }
    this.callPos = new Int32Array(k);
    this.replyPos = new Int32Array(k);
    this.callInPos = new Int32Array(k);
    this.replyInPos = new Int32Array(k);
    const m = layout.maxInflight;
    this.tokens = new Array<T | undefined>(k * m).fill(undefined);
    this.busy = new Uint8Array(k * m);
    this.free = new Int32Array(k * m);
    this.freeTop = new Int32Array(k);
    for (let j = 0; j < k; j++) {
      for (let t = 0; t < m; t++) this.free[j * m + t] = m - 1 - t;
      this.freeTop[j] = m;
    }
    this.inflightTo = new Int32Array(k);
    this.request = { from: 0, replyToken: 0, payload: this.callsIn[0].payload(0) };
    this.bell = new FutexBell(this.i32, nodeLine(nodeId) + FNODE.SLEEPING, nodeLine(nodeId) + FNODE.BELL, fences);
  }

  /** Creates a mesh of `nodes` daemons (segment 0600 in /dev/shm) and joins it as node 0. */
  static create<T = unknown>(options: FluxOptions): FluxNode<T> {
    const g: FluxGeometry = { nodes: options.nodes, capacity: options.capacity ?? 1024, maxInflight: options.maxInflight ?? 256, payloadBytes: options.payloadBytes ?? 32 };
    checkFluxGeometry(g, 'FluxNode.create');
    const layout = fluxLayoutOf(g);
    const { name, sab } = createLayerSegment(options.job ?? defaultJob(), 'flux', layout.total);
    writeFluxHeader(new DataView(sab), layout, joinRemoteFences());
    return FluxNode.attach<T>(name, sab, layout, 0, true);
  }

  /** Joins the mesh `name` as node `nodeId` (1..nodes-1; each once). */
  static join<T = unknown>(name: string, nodeId: number): FluxNode<T> {
    const sab = openLayerSegment(name, 'FluxNode.join');
    const layout = readFluxHeader(sab, name);
    if (!(Number.isInteger(nodeId) && nodeId >= 0 && nodeId < layout.nodes)) throw new WeftError('EINVAL', `FluxNode.join: node id ${nodeId} out of [0, ${layout.nodes}) for ${name}`);
    return FluxNode.attach<T>(name, sab, layout, nodeId, false);
  }

  private static attach<T>(name: string, sab: SharedArrayBuffer, layout: FluxLayout, nodeId: number, owner: boolean): FluxNode<T> {
    const i32 = new Int32Array(sab);
    const line = nodeLine(nodeId);
    const was = Atomics.compareExchange(i32, line + FNODE.STATE, NODE_FREE, NODE_JOINING);
    if (was !== NODE_FREE) throw new WeftError('EINVAL', `FluxNode.join: node ${nodeId} of ${name} was already joined (${ownerLabel(i32, line)}); each node id joins once per mesh`);
    // The owner before ATTACHED: a caller's liveness check must never find a joined node
    // without one (it would report the node dead).
    writeOwner(i32, line);
    const node = new FluxNode<T>(name, sab, layout, nodeId, owner);
    Atomics.store(i32, line + FNODE.STATE, NODE_ATTACHED);
    return node;
  }

  /** Liveness checks on paths that find nothing (server-watch.ts). */
  private readonly idle = new LivenessProbe();

  /** Calls this node made that have not been answered yet. */
  get inFlight(): number {
    return this.inflight;
  }

  /** Sends a call to node `target` carrying `token` back with its reply; false when maxInflight calls to it are out. */
  call(target: number, payload: Uint8Array, token: T): boolean {
    this.checkTarget(target, 'call');
    if (payload.length > this.layout.payloadBytes) throw new WeftError('EINVAL', `Flux node ${this.nodeId}: call of ${payload.length} bytes, the mesh carries ${this.layout.payloadBytes}`);
    const m = this.layout.maxInflight;
    // A node that left never answers (one not joined yet may still: its ring waits for it).
    if (Atomics.load(this.i32, nodeLine(target) + FNODE.STATE) === NODE_CLOSED) throw new ServerDisconnected(`Flux node ${this.nodeId}: call to node ${target} of ${this.name}: the node left the mesh${this.inflightTo[target] > 0 ? ` with ${this.inflightTo[target]} call(s) of this node unanswered` : ''}; calls to it would never be answered`);
    if (this.freeTop[target] === 0) {
      // Every slot toward it is out: a caller that only polls learns here if it died.
      if (this.idle.due()) this.checkPeers('call');
      return false;
    }
    const tag = this.free[target * m + --this.freeTop[target]];
    this.tokens[target * m + tag] = token;
    this.busy[target * m + tag] = 1;
    const ring = this.callsOut[target];
    const pos = this.callPos[target];
    ring.fill(pos, payload);
    ring.publish(pos, tag);
    this.callPos[target] = (pos + 1) | 0;
    this.inflightTo[target]++;
    this.inflight++;
    const line = nodeLine(target);
    ringBell(this.i32, line + FNODE.SLEEPING, line + FNODE.BELL);
    return true;
  }

  /** Delivers every reply that arrived (token, reply bytes, who answered); returns how many. */
  poll(onReply?: (token: T, reply: Uint8Array, from: number) => void): number {
    if (this.inflight === 0) return 0;
    const m = this.layout.maxInflight;
    let n = 0;
    for (let j = 0; j < this.layout.nodes; j++) {
      if (this.inflightTo[j] === 0) continue;
      const ring = this.repliesIn[j];
      for (let first = true; this.inflightTo[j] > 0 && (first ? ring.ready(this.replyInPos[j]) : ring.readyNext(this.replyInPos[j])); first = false) {
        const pos = this.replyInPos[j];
        this.replyInPos[j] = (pos + 1) | 0;
        const tag = ring.tag(pos);
        const at = j * m + tag;
        if (tag >>> 0 >= m || this.busy[at] === 0) throw new WeftError('EPROTO', `Flux node ${this.nodeId}: reply from node ${j} carries tag ${tag}, which names no call in flight: dropped (a stray write into the mesh)`);
        const token = this.tokens[at] as T;
        this.tokens[at] = undefined;
        n++;
        // The call stays in flight during the callback, so a call made from it cannot let
        // node j answer into the slot being read (maxInflight may equal capacity).
        try {
          onReply?.(token, ring.payload(pos), j);
        } finally {
          this.busy[at] = 0;
          this.free[j * m + this.freeTop[j]++] = tag;
          this.inflightTo[j]--;
          this.inflight--;
        }
      }
    }
    if (n === 0 && this.idle.due()) this.checkPeers('poll');
    return n;
  }

  /** The next call from any node (round robin), or null. */
  tryRecv(): FluxRequest | null {
    const k = this.layout.nodes;
    for (let v = 0; v < k; v++) {
      const j = this.at;
      const ring = this.callsIn[j];
      const pos = this.callInPos[j];
      if (j !== this.nodeId && ring.ready(pos)) {
        this.callInPos[j] = (pos + 1) | 0;
        const tag = ring.tag(pos);
        if (tag >>> 0 >= this.layout.maxInflight) throw new WeftError('EPROTO', `Flux node ${this.nodeId}: call from node ${j} carries tag ${tag}, out of [0, ${this.layout.maxInflight}): dropped (a stray write into the mesh)`);
        // The next receive looks at the next node first: one that keeps its ring full cannot
        // starve the others.
        this.at = j + 1 === k ? 0 : j + 1;
        const r = this.request;
        r.from = j;
        r.replyToken = j * 0x1_0000 + tag;
        r.payload = ring.payload(pos);
        return r;
      }
      this.at = j + 1 === k ? 0 : j + 1;
    }
    return null;
  }

  /** Answers the call whose replyToken tryRecv() gave. */
  reply(replyToken: number, payload: Uint8Array): void {
    const to = Math.floor(replyToken / 0x1_0000);
    const tag = replyToken % 0x1_0000;
    if (!(Number.isInteger(replyToken) && replyToken >= 0 && tag < this.layout.maxInflight)) throw new WeftError('EINVAL', `Flux node ${this.nodeId}: reply token ${replyToken} was not given by tryRecv()`);
    this.checkTarget(to, 'reply');
    if (payload.length > this.layout.payloadBytes) throw new WeftError('EINVAL', `Flux node ${this.nodeId}: reply of ${payload.length} bytes, the mesh carries ${this.layout.payloadBytes}`);
    const ring = this.repliesOut[to];
    const pos = this.replyPos[to];
    ring.fill(pos, payload);
    ring.publish(pos, tag);
    this.replyPos[to] = (pos + 1) | 0;
    const line = nodeLine(to);
    ringBell(this.i32, line + FNODE.SLEEPING, line + FNODE.BELL);
  }

  /** A reply or a call is waiting (what wait() and waitSync() wait for; they fail with ServerDisconnected when a node owing replies is gone). */
  ready(): boolean {
    for (let j = 0; j < this.layout.nodes; j++) {
      if (j === this.nodeId) continue;
      if (this.callsIn[j].ready(this.callInPos[j])) return true;
      if (this.inflightTo[j] > 0 && this.repliesIn[j].ready(this.replyInPos[j])) return true;
    }
    return this.closed;
  }

  /** Leaves the mesh (peers with calls to this node fail); node 0 also unlinks the segment. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    Atomics.store(this.i32, nodeLine(this.nodeId) + FNODE.STATE, NODE_CLOSED);
    for (let j = 0; j < this.layout.nodes; j++) {
      const line = nodeLine(j);
      Atomics.add(this.i32, line + FNODE.BELL, 1);
      ringBell(this.i32, line + FNODE.SLEEPING, line + FNODE.BELL);
    }
    if (this.owner) removeLayerSegment(this.name);
  }

  private checkTarget(j: number, what: string): void {
    if (this.closed) throw new WeftError('ECLOSED', `Flux node ${this.nodeId} of ${this.name} is closed`);
    if (!(Number.isInteger(j) && j >= 0 && j < this.layout.nodes && j !== this.nodeId)) throw new WeftError('EINVAL', `Flux node ${this.nodeId}: ${what} to node ${j}: must be another node in [0, ${this.layout.nodes})`);
  }

  /** Throws ServerDisconnected when a node this one waits on (calls in flight) left or died. */
  private checkPeers(what: string): void {
    for (let j = 0; j < this.layout.nodes; j++) {
      if (this.inflightTo[j] === 0) continue;
      const line = nodeLine(j);
      const state = Atomics.load(this.i32, line + FNODE.STATE);
      if (state === NODE_FREE) continue; // not joined yet: its calls wait in the ring
      // Joining: alive unless its owner words are written and name a thread that is gone.
      if (state === NODE_JOINING && Atomics.load(this.i32, line + OWNER_PID) === 0) continue;
      if ((state === NODE_ATTACHED || state === NODE_JOINING) && ownerAlive(this.i32, line)) continue;
      throw new ServerDisconnected(`Flux node ${this.nodeId}: ${what}: node ${j} of ${this.name} (${ownerLabel(this.i32, line)}) ${state === NODE_CLOSED ? 'left the mesh' : 'died'} with ${this.inflightTo[j]} call(s) of this node unanswered`);
    }
  }

  protected plan(what: string, options: WaitOptions): WaitPlan {
    return {
      oversubscribed: this.layout.nodes > availableParallelism(),
      call: { deadline: new Deadline(options.timeoutMs, options.signal), what: `Flux node ${this.nodeId} of ${this.name}: ${what}` },
      probe: () => this.checkPeers(what),
    };
  }
}

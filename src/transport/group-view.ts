/**
 * What collectives run on: the job's whole transport (`Device`), or a subgroup's view of it
 * (`GroupView`). A view numbers its members 0..size-1, maps them to the job's ranks, and moves
 * its calls to slots of their own (a group id in the high bits of the slot), so a subgroup
 * runs every collective over the job's existing pairs, with no new connection, and its
 * messages never meet the parent's or a sibling's.
 *
 * Slots (layout H.SLOT_LO/HI): low word the tag, high word `groupId * 64 + collective`.
 * Group ids stay below 2^15 so a slot stays an exact JS number.
 */
import { WeftError } from '../errors.js';
import type { Deadline } from '../util/deadline.js';
import type { Board } from './board.js';
import type { Device } from './device.js';
import type { TransportOp } from './ops.js';
import type { Pair } from './pair.js';
import type { SharedArrays } from './shared-arrays.js';

/** Collectives per slot range (signature.ts COLLECTIVES has fewer). */
const SLOTS_PER_GROUP = 64 * 2 ** 32;
/** Group ids are in [1, MAX_GROUP_ID]; 0 is the job itself. */
export const MAX_GROUP_ID = 2 ** 15 - 1;

/**
 * A call's name in errors: the text, a function that makes it, or an object whose `what`
 * makes it (a CollectiveCall). Read only when an error needs it: building the text on every
 * call cost a string per step of every collective.
 */
export type WaitLabel = string | (() => string) | { readonly what: string };

/** The text of a WaitLabel. */
export function labelText(l: WaitLabel): string {
  return typeof l === 'string' ? l : typeof l === 'function' ? l() : l.what;
}

/** The transport as collectives use it (the Device, or a subgroup's view of it). */
export interface CollectiveTransport {
  readonly label: string;
  readonly failure: WeftError | undefined;
  readonly closed: boolean;
  readonly board: Board | undefined;
  /**
   * The board of this rank's host when the job spans hosts (the hierarchy's host group has it
   * through GroupView's hostBoard option). Only the hierarchical plans take it, each holding it
   * for the whole call (Board.holdAsync): board calls pair up in call order, and a call's later
   * steps start when its earlier ones end, at different times on different ranks, so a board
   * call made meanwhile would pair with one of them on one rank and not on another.
   */
  readonly hostBoard: Board | undefined;
  readonly shared: SharedArrays;
  readonly stagedRings: boolean;
  /** Added to every slot of a call on this transport. */
  readonly slotBase: number;
  /** The job rank of member `r`. */
  worldRank(r: number): number;
  /** The member number of job rank `w` (-1 when not a member). */
  groupRank(w: number): number;
  /** The pair toward member `r`. */
  pair(r: number): Pair;
  nextCall(slot: number): number;
  claimSlot(slot: number, what: WaitLabel): void;
  releaseSlot(slot: number): void;
  markFinished(slot: number, call: number): void;
  finishCall(slot: number, call: number): void;
  /** Hands the operations posted so far to the fabric now (Device.flush). */
  flush(): void;
  checkUsable(what: string): void;
  /** What checkUsable checks, as a boolean (no string to build on the hot path). */
  readonly usable: boolean;
  abort(err: WeftError): void;
  waitSync(ops: readonly TransportOp[], deadline: Deadline, what: WaitLabel): void;
  pollFor(ops: readonly TransportOp[], ms: number): boolean;
  waitAsync(ops: readonly TransportOp[], deadline: Deadline, what: WaitLabel): Promise<void>;
  /** A fresh group id for a subgroup made over this transport (see Device.proposeGroupId). */
  readonly device: Device;
}

/**
 * A subgroup's view of the job's transport.
 *
 * @example
 * const view = new GroupView(device, [0, 2], 7);   // job ranks 0 and 2, group id 7
 * view.pair(1);                                    // the pair toward job rank 2
 */
export class GroupView implements CollectiveTransport {
  readonly slotBase: number;
  readonly label: string;
  private readonly byWorld = new Map<number, number>();
  readonly hostBoard: Board | undefined;

  constructor(
    readonly device: Device,
    /** members[r]: the job rank of member r. */
    readonly members: readonly number[],
    readonly groupId: number,
    /**
     * The view is its host's ranks, in order (the hierarchy's host group): its small
     * allreduces use the device's host board. One group per host may: board calls pair up in
     * call order, and the hierarchy's plans make them only as a call's first step, when the
     * call is made, in the same order on every rank.
     */
    options: { hostBoard?: boolean } = {},
  ) {
    if (!Number.isInteger(groupId) || groupId < 1 || groupId > MAX_GROUP_ID) throw new WeftError('EINVAL', `${device.label}: group id ${groupId} is outside [1, ${MAX_GROUP_ID}]: too many subgroups in one job`);
    this.slotBase = groupId * SLOTS_PER_GROUP;
    this.label = device.label;
    members.forEach((w, r) => this.byWorld.set(w, r));
    const hb = options.hostBoard ? device.hostBoard : undefined;
    this.hostBoard = hb && hb.members.length === members.length && hb.members.every((w, i) => w === members[i]) ? hb : undefined;
  }

  get failure(): WeftError | undefined {
    return this.device.failure;
  }
  get closed(): boolean {
    return this.device.closed;
  }
  /** The board spans every rank of the job: a subgroup has none. */
  get board(): Board | undefined {
    return undefined;
  }
  get shared(): SharedArrays {
    return this.device.shared;
  }
  get stagedRings(): boolean {
    return this.device.stagedRings;
  }
  worldRank(r: number): number {
    const w = this.members[r];
    if (w === undefined) throw new WeftError('EINVAL', `${this.label}: no member ${r} in a group of ${this.members.length}`);
    return w;
  }
  groupRank(w: number): number {
    return this.byWorld.get(w) ?? -1;
  }
  pair(r: number): Pair {
    return this.device.pair(this.worldRank(r));
  }
  nextCall(slot: number): number {
    return this.device.nextCall(slot);
  }
  claimSlot(slot: number, what: WaitLabel): void {
    this.device.claimSlot(slot, what);
  }
  releaseSlot(slot: number): void {
    this.device.releaseSlot(slot);
  }
  markFinished(slot: number, call: number): void {
    this.device.markFinished(slot, call);
  }
  flush(): void {
    this.device.flush();
  }
  finishCall(slot: number, call: number): void {
    this.device.finishCall(slot, call);
  }
  checkUsable(what: string): void {
    this.device.checkUsable(what);
  }
  get usable(): boolean {
    return this.device.usable;
  }
  abort(err: WeftError): void {
    this.device.abort(err);
  }
  waitSync(ops: readonly TransportOp[], deadline: Deadline, what: WaitLabel): void {
    this.device.waitSync(ops, deadline, what);
  }
  pollFor(ops: readonly TransportOp[], ms: number): boolean {
    return this.device.pollFor(ops, ms);
  }
  waitAsync(ops: readonly TransportOp[], deadline: Deadline, what: WaitLabel): Promise<void> {
    return this.device.waitAsync(ops, deadline, what);
  }
}

/**
 * copyrpc flow control of one endpoint (notes: in_flight + 2R <= C). in_flight is what we
 * wrote minus the peer's consumer position (piggybacked on its batches, or READ from its
 * consumer word when stale); R is the response space we promised the peer by credit grants;
 * C the ring cycle of this direction. `call` checks the ring and the credit the peer granted
 * us; `reply` checks nothing, because the caller's credit reserved its space. This class
 * holds those numbers and the arithmetic on them; the send and receive sides move them.
 *
 * An endpoint is one object: Endpoint extends RecvParser extends SendBatcher extends
 * FlowControl, one file per job. Separate objects cost the hot path a pointer chase per
 * field and V8 inlining budget per call: 15% more CPU per call when we tried.
 */
import { ALIGNMENT, maxResponseReservation } from './constants.js';

export abstract class FlowControl {
  /** C: the ring cycle of this direction (min of our send ring and the peer's recv ring). */
  C = 0;
  cMask = 0;
  /** The peer's consumer position of our bytes (piggybacked or READ). */
  remoteConsumer = 0;
  /** R: response bytes we promised the peer and have not written yet. */
  R = 0;
  /** The most R may grow to (the configured reservation, at most C / 4). */
  maxResp = 0;
  /** Credit the peer granted us for calls. */
  peerCredit = 0;
  /** The peer's R ceiling: our credit can never exceed it. */
  peerCap = 0;
  /** Credit we granted that the peer has not used for a request yet (as far as we know). */
  creditOut = 0;
  /** A call found the ring full: READ the peer's consumer word at the next flush. */
  readWanted = false;
  readInFlight = false;
  /** A call lacked credit: tell the peer our consumer position at the next flush. */
  reportWanted = false;
  /** The consumer position we publish: nothing of the recv ring before it is needed any more. */
  releasePos = 0;
  /** The consumer position the peer was last told of (piggybacked on every batch). */
  lastNotified = 0;

  /**
   * At connect: credit is mutual from here on, with no handshake; both sides derive the
   * initial credit from the two infos.
   */
  protected connectFlow(C: number, maxRespConfigured: number, peerMaxResp: number, peerCycle: number): void {
    this.C = C;
    this.cMask = C - 1;
    this.maxResp = maxResponseReservation(maxRespConfigured, C);
    this.R = this.maxResp;
    this.creditOut = this.maxResp;
    this.peerCap = maxResponseReservation(peerMaxResp, peerCycle);
    this.peerCredit = this.peerCap;
  }

  /** Writing up to virtual position `end` keeps in_flight + 2R <= C. */
  protected fits(end: number): boolean {
    return end - this.remoteConsumer + 2 * this.R <= this.C;
  }

  /**
   * The credit grant a batch carries when our writes reach `end`: half of what the ring has
   * left after R, capped by maxResp, in whole 32-byte units. Adds it to R and creditOut.
   */
  protected grant(end: number): number {
    const R = this.R;
    let g = Math.min((this.C - (end - this.remoteConsumer)) / 2 - R, this.maxResp - R);
    g = g >= ALIGNMENT ? g & ~(ALIGNMENT - 1) : 0;
    this.R = R + g;
    this.creditOut += g;
    return g;
  }

  /** What grant(P) would give now, without giving it. */
  protected grantable(P: number): number {
    const g = Math.min((this.C - (P - this.remoteConsumer)) / 2 - this.R, this.maxResp - this.R);
    return g > 0 ? g : 0;
  }

  /** A grant is worth a metadata-only batch: a good chunk, or everything the peer can hold. */
  protected grantWorthSending(P: number): boolean {
    const g = this.grantable(P);
    return g >= ALIGNMENT && (g * 8 >= this.maxResp || this.creditOut + g >= this.maxResp);
  }

  /**
   * Applies a batch's consumer position and credit grant; false (nothing applied) when they
   * are impossible: see flowRejection(). `sent`: bytes we have posted.
   */
  protected acceptFlow(consumer: number, grant: number, sent: number): boolean {
    if (consumer > sent || (consumer >>> 0) & (ALIGNMENT - 1)) return false;
    if (grant !== 0 && (this.peerCredit + grant > this.peerCap || (grant >>> 0) & (ALIGNMENT - 1))) return false;
    if (consumer > this.remoteConsumer) this.remoteConsumer = consumer;
    this.peerCredit += grant;
    return true;
  }

  /** Why acceptFlow() refused these values (cold: for the endpoint's error). */
  protected flowRejection(consumer: number, grant: number, sent: number): string {
    if (consumer > sent || (consumer >>> 0) & (ALIGNMENT - 1)) return `consumer position ${consumer} is beyond the ${sent} bytes we sent (or unaligned)`;
    return `credit grant ${grant} would raise our credit to ${this.peerCredit + grant}, above the peer's ceiling of ${this.peerCap}`;
  }

  /** A consumer READ returned `v`: taken if plausible (a torn read is not). */
  protected consumerRead(v: number, sent: number): boolean {
    this.readInFlight = false;
    if (v > this.remoteConsumer && v <= sent && v % ALIGNMENT === 0) {
      this.remoteConsumer = v;
      return true;
    }
    return false;
  }

  /** A request claimed response allowance `ia`: false when we never granted that much. */
  protected takeRequestCredit(ia: number): boolean {
    if (ia < 2 * ALIGNMENT || ia > this.creditOut) return false;
    this.creditOut -= ia;
    return true;
  }

  /** Debug mode: what breaks in_flight + 2R <= C or the counters' signs at producer P, if anything. */
  protected violation(P: number): string | undefined {
    const inflight = P - this.remoteConsumer;
    if (inflight + 2 * this.R > this.C || this.R < 0 || this.peerCredit < 0 || this.creditOut < 0 || this.creditOut > this.R) {
      return `in_flight ${inflight} + 2R (R=${this.R}) > C ${this.C}, or negative credit (peer credit ${this.peerCredit}, outstanding grant ${this.creditOut})`;
    }
    return undefined;
  }
}

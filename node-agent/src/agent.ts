/**
 * The node agent (`kindling agent`, on the host, privileged, host root mounted). It follows the
 * machine-config-daemon protocol on its Node's annotations and is level-based: every step reads the Node and
 * the journal in the host root and does the next thing, so a restart (a reboot, a kill at any line) resumes
 * where it was, and running it twice changes nothing.
 *
 *   desiredConfig ≠ currentConfig → state Working → compare payload with the host, and with the record of
 *   what the applied config wrote (record.ts: what the payload no longer declares is removed) →
 *   [drain-<hash>, wait lastAppliedDrain] → apply atomically (journal, backup, write, verify) →
 *   [reboot → health gate] → [uncordon-<hash>, wait lastAppliedDrain] → currentConfig = hash, state Done.
 *   Any failure: backup restored, state Degraded, reason. A health gate that fails (gate.ts): backup
 *   restored, reboot, state Degraded with the reason; the node stays cordoned, as a failed apply leaves it.
 *
 * Drain and reboot rule: the pool's disruption policy (in the payload Secret, api/src/disruption.ts) says
 * which action each change needs, written or removed; the agent runs the least action covering them all
 * (disruption.ts). It asks for a drain only for Drain or Reboot; without a reboot it runs the unit actions
 * (daemon-reload, reload, restart) once the files are written, and a restart is gated like a reboot (gate.ts).
 * What the policy does not name needs a drain and a reboot: the agent cannot know which running process reads
 * it, and a reboot is the one way every service, kubelet included, starts from the new config. While the
 * payload Secret carries the rollout's ceiling (the controller let the change past a closed maintenance window
 * as one that needs neither), a plan that drains or reboots applies nothing: Degraded with why, and tried again
 * once the upgrader rewrites the Secret without that ceiling.
 *
 * A host's first update: Ignition wrote what is on it, so there is no record; the upgrader hands over the
 * config the host booted with beside the target (PAYLOAD_KEYS.bootedConfig), which stands for the record, and
 * against which the update is weighed: what it declared alike (kubelet's enablement, a preset to Ignition and
 * a link to the agent) is written without an action.
 */
import * as k8s from '#k8s';
import { ANNOTATIONS, DRAIN_PREFIX, NODE_STATES, UNCORDON_PREFIX } from '../../api/src/keys.js';
import { isNotFound } from '../../support/src/errors.js';
import { ResilientInformer } from '../../support/src/informer.js';
import type { Logger } from '../../support/src/logger.js';
import type { Clock } from '../../support/src/timers.js';
import { PAYLOAD_KEYS, payloadSecretName } from '../../api/src/node-agent.js';
import { gateAction, gateTimeoutMs, type GateAction } from './gate.js';
import { describeDisruption, parseEffectivePolicy, type Disruption } from '../../api/src/disruption.js';
import { beyondCeiling, disruptionOf, systemctlCommands, unitActionsOf } from './disruption.js';
import { parseIgnition } from '../../support/src/ignition/ignition.js';
import { UnsupportedConfigError } from '../../support/src/ignition/refusal.js';
import type { Host, Journal } from './host.js';
import { applyPlan, commitRecord, nextRecord, planOf, readRecord, recordOf, type Booted, type Plan } from './record.js';
import { MAX_PAYLOAD_SECRET_BYTES } from '../../api/src/limits.js';
import { InflateBudget } from '../../support/src/inflate.js';
import type { RebootAction } from './reboot.js';
import { clusterScoped } from '../../support/src/object-key.js';

export interface AgentOptions {
  kubeConfig: k8s.KubeConfig;
  node: string;
  host: Host;
  /** Guest namespace of the payload Secret. */
  namespace: string;
  reboot: RebootAction;
  log: Logger;
  /** Longest wait between steps when no event arrives. */
  pollMs?: number;
  /** Wall time of the health gate (it counts across reboots); Date.now by default. */
  clock?: Pick<Clock, 'now'>;
}

export type StepOutcome = 'idle' | 'wait' | 'continue';
type Annotations = Record<string, string>;

/**
 * The payload Secret at a hash: the config, the pool's effective disruption policy (JSON) when it has one,
 * and the config the host booted with when the upgrader handed it over (a node it never updated).
 */
interface Payload {
  config: Buffer;
  policy: string | undefined;
  booted: Booted | undefined;
  /** Why no node may drain or reboot now (PAYLOAD_KEYS.rolloutCeiling), if the rollout says so. */
  ceiling: string | undefined;
}

const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);

function finished(ann: Annotations, desired: string): boolean {
  const drain = ann[ANNOTATIONS.desiredDrain];
  return (
    ann[ANNOTATIONS.currentConfig] === desired &&
    ann[ANNOTATIONS.state] === NODE_STATES.done &&
    (drain === undefined || drain === ann[ANNOTATIONS.lastAppliedDrain])
  );
}

export class Agent {
  #opts: AgentOptions;
  #core: k8s.CoreV1Api;
  #informer: ResilientInformer<k8s.V1Node>;
  #wake: () => void = () => undefined;
  /**
   * The hash this process failed on: not retried until desiredConfig changes or the agent restarts, or, when the
   * rollout's ceiling held it back (`ceiling`), until the payload Secret carries another ceiling or none.
   */
  #failed: { hash: string; ceiling?: string } | undefined;
  /** This process looked for the record of the applied config once (see #bootstrapRecord). */
  #recordChecked = false;

  constructor(opts: AgentOptions) {
    this.#opts = opts;
    this.#core = opts.kubeConfig.makeApiClient(k8s.CoreV1Api);
    const fieldSelector = `metadata.name=${opts.node}`;
    this.#informer = new ResilientInformer<k8s.V1Node>({
      kubeConfig: opts.kubeConfig,
      path: '/api/v1/nodes',
      fieldSelector,
      list: () => this.#core.listNode({ fieldSelector }),
      log: opts.log,
      onEvent: () => this.#wake(),
    });
  }

  /** Steps until the signal aborts. */
  async run(signal: AbortSignal): Promise<void> {
    await this.#informer.start();
    this.#opts.log.info({ node: this.#opts.node, root: this.#opts.host.root }, 'Agent started');
    while (!signal.aborted) {
      let outcome: StepOutcome = 'wait';
      try {
        outcome = await this.step();
      } catch (err) {
        this.#opts.log.warn({ err }, 'Step failed: retrying');
      }
      if (outcome !== 'continue')
        await this.#sleep(outcome === 'idle' ? 4 * (this.#opts.pollMs ?? 5_000) : (this.#opts.pollMs ?? 5_000), signal);
    }
    await this.#informer.stop();
  }

  /** One step of the protocol. */
  async step(): Promise<StepOutcome> {
    const node = this.#informer.get(clusterScoped(this.#opts.node));
    if (!node) return 'wait';
    const journal = await this.#opts.host.readJournal();
    if (journal?.phase === 'applying') return this.#recover(journal);
    return this.#next(node, node.metadata?.annotations ?? {}, journal);
  }

  async #next(node: k8s.V1Node, ann: Annotations, journal: Journal | undefined): Promise<StepOutcome> {
    const desired = ann[ANNOTATIONS.desiredConfig];
    if (!desired) return 'idle';
    if (finished(ann, desired)) {
      if (journal) await this.#settle(journal);
      await this.#bootstrapRecord(desired);
      return 'idle';
    }
    if (await this.#keepsFailure(ann, desired)) return 'idle';
    if (journal?.hash === desired) return this.#afterApply(node, ann, journal);
    // A journal for another hash: that config is on disk and the new one is compared against it.
    if (journal) await this.#settle(journal);
    return this.#update(ann, desired);
  }

  /** Degraded on `desired` by this process, and not to be tried again yet: see #failed. */
  async #keepsFailure(ann: Annotations, desired: string): Promise<boolean> {
    const failed = this.#failed;
    if (ann[ANNOTATIONS.state] !== NODE_STATES.degraded || failed?.hash !== desired) return false;
    if (failed.ceiling === undefined) return true;
    const payload = await this.#payload(desired);
    return payload === undefined || payload.ceiling === failed.ceiling;
  }

  /** Ends a journal whose config stays on disk (applied) or was rolled back: the record says which. */
  async #settle(journal: Journal): Promise<void> {
    if (journal.phase === 'applied' && journal.record) await commitRecord(this.#opts.host, journal.record);
    await this.#opts.host.clearJournal();
  }

  /**
   * A host the agent never updated has no record: what is on it came from Ignition at first boot, so the
   * config at the current hash is the record, while the payload Secret still holds it.
   */
  async #bootstrapRecord(hash: string): Promise<void> {
    if (this.#recordChecked) return;
    this.#recordChecked = true;
    const host = this.#opts.host;
    if (await readRecord(host)) return;
    const payload = await this.#payload(hash);
    if (!payload) return;
    try {
      await commitRecord(host, recordOf(hash, await host.entries(parseIgnition(payload.config))));
    } catch (err) {
      if (!(err instanceof UnsupportedConfigError)) throw err;
      this.#opts.log.warn({ hash, reason: err.message }, 'No record of the applied config: it cannot be read');
    }
  }

  /** Killed mid-write: put the host back as it was, then start over. */
  async #recover(journal: Journal): Promise<StepOutcome> {
    await this.#opts.host.restore(journal);
    await this.#opts.host.clearJournal();
    this.#opts.log.warn({ hash: journal.hash }, 'Found an interrupted apply: restored the backup');
    return 'continue';
  }

  async #update(ann: Annotations, desired: string): Promise<StepOutcome> {
    const payload = await this.#payload(desired);
    if (!payload) return 'wait';
    const host = this.#opts.host;
    const plan = await this.#plan(payload);
    if (typeof plan === 'string') return this.#degrade(desired, plan);
    const disruption = this.#disruption(payload, plan);
    if (typeof disruption === 'string') return this.#degrade(desired, disruption);
    const beyond = plan.changes.length === 0 ? undefined : beyondCeiling(disruption, payload.ceiling);
    if (beyond !== undefined) return this.#degrade(desired, beyond, ann, payload.ceiling);
    await this.#annotate(ann, {
      [ANNOTATIONS.state]: NODE_STATES.working,
      [ANNOTATIONS.reason]: null,
      [ANNOTATIONS.ceilingHeld]: null,
    });
    if (plan.changes.length === 0) {
      await commitRecord(host, nextRecord(desired, plan.entries, plan.previous, []));
      return this.#finish(ann, desired);
    }
    if (disruption.drain && !(await this.#drained(ann, desired))) return 'wait';
    try {
      await applyPlan(host, plan, {
        hash: desired,
        reboot: disruption.reboot,
        units: unitActionsOf(disruption),
        bootId: await this.#opts.reboot.bootId(),
      });
    } catch (err) {
      return this.#degrade(desired, `${(err as Error).message} (all changes rolled back)`);
    }
    const removals = plan.changes.length - plan.writes.length;
    // previous "none": a host first updated without the config it booted with (gone, or too large to hand
    // over): nothing could be removed, and every write was weighed.
    this.#opts.log.info(
      {
        hash: desired,
        changes: plan.writes.length,
        removals,
        previous: plan.previousFrom,
        action: describeDisruption(disruption),
      },
      'Applied the config',
    );
    return 'continue';
  }

  /** The least action the pool's policy gives the plan's changes, or why the policy cannot be read. */
  #disruption(payload: Payload, plan: Plan): Disruption | string {
    try {
      return disruptionOf(parseEffectivePolicy(payload.policy), plan.weighed);
    } catch (err) {
      return `${(err as Error).message} (nothing applied)`;
    }
  }

  /** The plan for a payload, or why it cannot be applied in place. */
  async #plan(payload: Payload): Promise<Plan | string> {
    try {
      const plan = await planOf(this.#opts.host, payload.config, payload.booted);
      if (plan.bootedUnread)
        this.#opts.log.warn({ reason: plan.bootedUnread }, 'Cannot read the config the host booted with: ignored');
      return plan;
    } catch (err) {
      if (err instanceof UnsupportedConfigError) return err.message;
      throw err;
    }
  }

  /** Reboot, health gate, rollback (gate.ts decides; this carries it out and persists it in the journal). */
  async #afterApply(node: k8s.V1Node, ann: Annotations, journal: Journal): Promise<StepOutcome> {
    const { reboot, log } = this.#opts;
    const now = (this.#opts.clock ?? Date).now();
    const action = gateAction({
      journal,
      bootId: await reboot.bootId(),
      node,
      now,
      timeoutMs: gateTimeoutMs(ann[ANNOTATIONS.healthCheckTimeout]),
    });
    switch (action.kind) {
      case 'reboot':
        log.info({ hash: journal.hash, phase: journal.phase }, 'Rebooting');
        await reboot.reboot();
        return 'wait';
      case 'wait':
        log.debug({ hash: journal.hash, why: action.why }, 'Health check: not yet');
        return 'wait';
      case 'degrade':
        return this.#degrade(journal.hash, action.reason, ann);
      case 'finish':
        if (journal.record) await commitRecord(this.#opts.host, journal.record);
        return this.#finish(ann, journal.hash);
      default:
        return this.#record(action, journal, ann, now);
    }
  }

  /** The gate's steps that change the journal. */
  async #record(action: GateAction, journal: Journal, ann: Annotations, now: number): Promise<StepOutcome> {
    const { host, reboot, log } = this.#opts;
    switch (action.kind) {
      case 'startGate':
        await host.writeJournal({ ...journal, gateStartedAt: now });
        log.info(
          { hash: journal.hash, timeout: ann[ANNOTATIONS.healthCheckTimeout] },
          journal.reboot
            ? 'Rebooted: waiting for the node to be healthy'
            : 'Restarted: waiting for the node to be healthy',
        );
        return 'continue';
      case 'pass':
        await host.writeJournal({ ...journal, healthy: true });
        log.info({ hash: journal.hash, afterMs: now - (journal.gateStartedAt ?? now) }, 'Health check passed');
        return 'continue';
      case 'runUnits':
        return this.#runUnits(journal);
      case 'rollBack':
        // Restored before the journal says so: killed in between, the next run restores again (idempotent).
        await host.restore(journal);
        await host.writeJournal({
          ...journal,
          phase: 'rolledBack',
          reason: action.reason,
          bootId: await reboot.bootId(),
          unitsRun: false,
        });
        log.error({ hash: journal.hash, reason: action.reason }, 'Health check failed: restored the backup');
        return 'continue';
      default:
        return 'wait';
    }
  }

  /**
   * The unit actions of an update without a reboot, after its files (or, after a rollback, the restored ones)
   * are on the host. Run again when killed before the journal says they ran: each is idempotent on systemd.
   */
  async #runUnits(journal: Journal): Promise<StepOutcome> {
    const { host, reboot, log } = this.#opts;
    for (const args of systemctlCommands(journal.units ?? { daemonReload: false, reload: [], restart: [] }))
      await reboot.systemctl(args);
    await host.writeJournal({ ...journal, unitsRun: true });
    log.info({ hash: journal.hash, phase: journal.phase, units: journal.units }, 'Ran the unit actions');
    return 'continue';
  }

  /** Asks for a drain for this hash; true once the drainer says it is done. */
  async #drained(ann: Annotations, desired: string): Promise<boolean> {
    const want = `${DRAIN_PREFIX}${desired}`;
    if (ann[ANNOTATIONS.desiredDrain] !== want) {
      await this.#annotate(ann, { [ANNOTATIONS.desiredDrain]: want });
      this.#opts.log.info({ desiredDrain: want }, 'Asked for a drain');
      return false;
    }
    return ann[ANNOTATIONS.lastAppliedDrain] === want;
  }

  async #finish(ann: Annotations, hash: string): Promise<StepOutcome> {
    const drain = ann[ANNOTATIONS.desiredDrain];
    if (drain?.startsWith(DRAIN_PREFIX)) {
      await this.#annotate(ann, { [ANNOTATIONS.desiredDrain]: `${UNCORDON_PREFIX}${hash}` });
      return 'wait';
    }
    if (drain !== undefined && drain !== ann[ANNOTATIONS.lastAppliedDrain]) return 'wait';
    await this.#annotate(ann, {
      [ANNOTATIONS.currentConfig]: hash,
      [ANNOTATIONS.state]: NODE_STATES.done,
      [ANNOTATIONS.reason]: null,
      [ANNOTATIONS.ceilingHeld]: null,
    });
    await this.#opts.host.clearJournal();
    this.#failed = undefined;
    this.#opts.log.info({ hash }, 'Node at the desired config');
    return 'idle';
  }

  /** `ann`: the Node as this step read it, when nothing was written since (else every write is made); `ceiling`:
   * the rollout's ceiling that holds the update back (retried once it changes). */
  async #degrade(desired: string, reason: string, ann: Annotations = {}, ceiling?: string): Promise<StepOutcome> {
    this.#failed = { hash: desired, ...(ceiling === undefined ? {} : { ceiling }) };
    // The marker, not the reason's words, tells the engines this node waits for the window rather than failed.
    await this.#annotate(ann, {
      [ANNOTATIONS.state]: NODE_STATES.degraded,
      [ANNOTATIONS.reason]: reason,
      [ANNOTATIONS.ceilingHeld]: ceiling === undefined ? null : desired,
    });
    this.#opts.log.error({ hash: desired, reason }, 'Degraded');
    return 'idle';
  }

  /** The payload Secret for this hash, or nothing while the upgrader has not written it (yet). */
  async #payload(hash: string): Promise<Payload | undefined> {
    try {
      const secret = await this.#core.readNamespacedSecret({
        name: payloadSecretName(this.#opts.node),
        namespace: this.#opts.namespace,
      });
      const data = secret.data ?? {};
      const read = (key: string): string | undefined =>
        data[key] === undefined ? undefined : Buffer.from(data[key], 'base64').toString();
      if (read(PAYLOAD_KEYS.hash) !== hash) return undefined;
      return {
        config: Buffer.from(data[PAYLOAD_KEYS.config] ?? '', 'base64'),
        policy: read(PAYLOAD_KEYS.disruptionPolicy),
        booted: this.#booted(read(PAYLOAD_KEYS.bootedHash), data[PAYLOAD_KEYS.bootedConfig]),
        ceiling: read(PAYLOAD_KEYS.rolloutCeiling),
      };
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  /** The booted config of a payload Secret (gzip, inflated within the size of a Secret), if it has a readable one. */
  #booted(hash: string | undefined, gz: string | undefined): Booted | undefined {
    if (hash === undefined || gz === undefined) return undefined;
    try {
      return {
        hash,
        config: new InflateBudget(MAX_PAYLOAD_SECRET_BYTES).gunzipSync(Buffer.from(gz, 'base64'), 'bootedConfig'),
      };
    } catch (err) {
      this.#opts.log.warn({ reason: (err as Error).message }, 'Cannot read the config the host booted with: ignored');
      return undefined;
    }
  }

  /** Merge patch of the agent's own annotations; skipped when the Node already holds them. */
  async #annotate(ann: Annotations, want: Record<string, string | null>): Promise<void> {
    if (Object.entries(want).every(([k, v]) => (ann[k] ?? null) === v)) return;
    await this.#core.patchNode({ name: this.#opts.node, body: { metadata: { annotations: want } } }, merge);
  }

  #sleep(ms: number, signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        this.#wake = () => undefined;
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal.addEventListener('abort', done);
      this.#wake = done;
    });
  }
}

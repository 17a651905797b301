/**
 * Why the pool's nodes are moving: which inputs changed between the config the nodes are at and the target
 * (the release, which config document of which ConfigMap, the infrastructure template) and the strategy each
 * change takes. The controller stores it in the pool's status (status.rollout) the first time it sees the
 * rollout, while the old hash's token Secret still holds the old inputs, and keeps it for as long as that
 * rollout is under way: the token Secret expires, the record does not. `kindling plan` shows the document
 * changes from the same functions.
 */
import { configDisruption } from '../../api/src/disruption-config.js';
import { describeDisruption, type EffectiveDisruptionPolicy } from '../../api/src/disruption.js';
import type {
  InPlaceEngine,
  RolloutDisruption,
  RolloutChange,
  RolloutRecord,
  RolloutStrategy,
  UpgradeType,
} from '../../api/src/nodepool.js';
import { documentsUnsupportedInPlace } from '../../api/src/in-place.js';
import { normaliseConfig, type ConfigSource, type HashInputs } from './hash.js';

/** As the CRD's maxItems of status.rollout.changes. */
export const MAX_CHANGES = 64;

export interface DocumentChange {
  kind: string;
  name: string;
  change: 'added' | 'removed' | 'changed';
  /** The ConfigMaps of the pool holding the document now (none when removed). */
  configMaps: string[];
}

interface Doc {
  kind: string;
  metadata: { name: string };
}

/** `<kind>/<name>` → the document as JSON, from SECRET_KEYS.config. */
function documents(config: string): Map<string, string> {
  const docs = JSON.parse(config) as Doc[];
  return new Map(docs.map((d) => [`${d.kind}/${d.metadata.name}`, JSON.stringify(d)]));
}

/** Which ConfigMaps hold each document (each ConfigMap normalised alone). */
export function documentSources(configMaps: readonly ConfigSource[]): Map<string, string[]> {
  const where = new Map<string, string[]>();
  for (const cm of configMaps) {
    for (const key of documents(normaliseConfig([cm])).keys()) where.set(key, [...(where.get(key) ?? []), cm.name]);
  }
  return where;
}

/** The documents added, removed or changed between two SECRET_KEYS.config values, by kind and name. */
export function documentChanges(before: string, after: string, sources: Map<string, string[]>): DocumentChange[] {
  const [a, b] = [documents(before), documents(after)];
  const keys = [...new Set([...a.keys(), ...b.keys()])].sort();
  return keys.flatMap((key) => {
    const change = !a.has(key) ? 'added' : !b.has(key) ? 'removed' : a.get(key) === b.get(key) ? undefined : 'changed';
    if (!change) return [];
    const [kind = '', name = ''] = key.split('/');
    return [{ kind, name, change, configMaps: change === 'removed' ? [] : (sources.get(key) ?? []) }];
  });
}

/**
 * What a change of each input does to the nodes, per upgrade type: a new payload (release, config) is
 * applied in place on an InPlace pool and rolls the Machines of a Replace pool; a new infrastructure
 * template rolls a Replace pool, and reaches only new Machines of an InPlace pool on the MachineSet engine
 * (its bare MachineSet does not replace Machines). On the ClusterAPI engine a template change falls back to a
 * rollout (the extension never takes an infrastructure change in place), and so does a payload the agent cannot
 * apply in place (see payloadBlockers).
 */
export function strategyOf(
  input: RolloutChange['input'],
  upgradeType: UpgradeType,
  engine: InPlaceEngine = 'MachineSet',
): RolloutStrategy {
  if (upgradeType === 'Replace') return 'Rollout';
  if (input !== 'template') return 'InPlace';
  return engine === 'ClusterAPI' ? 'Rollout' : 'NewMachines';
}

export interface WhyInput {
  upgradeType: UpgradeType;
  /** The in-place engine of an InPlace pool (default MachineSet). */
  engine?: InPlaceEngine;
  /** Config hashes: the nodes' and the target (equal when only the template changed). */
  from: string;
  to: string;
  /** The inputs of each hash (from their token Secrets); undefined when no longer known. */
  before?: HashInputs;
  after?: HashInputs;
  /** The pool's ConfigMaps now, to name where each document is. */
  configMaps: readonly ConfigSource[];
  /** The infrastructure template the running Machines use and the one the pool names, when they differ. */
  template?: { from: string; to: string };
  /** When the rollout was first seen (RFC3339). */
  now: string;
  /** The pool's effective disruption policy (InPlace pools). */
  disruptionPolicy?: EffectiveDisruptionPolicy;
}

/**
 * What the new payload holds that the node agent cannot apply in place, when that makes it roll: on the
 * ClusterAPI engine the extension refuses such a payload and Cluster API replaces the Machines (on the
 * MachineSet engine the agent is handed it and halts the rollout Degraded: it stays InPlace). Judged on the
 * pool's config documents with the agent's own rules (api/src/in-place.ts), as `kindling plan` does; the
 * release's own payload is not read here.
 */
function payloadBlockers(i: DisruptionInput): string[] {
  return i.upgradeType === 'InPlace' && i.engine === 'ClusterAPI' && i.after
    ? documentsUnsupportedInPlace(i.after.config)
    : [];
}

/** The strategy of every payload change (release, config): one payload, so one way. */
const payloadStrategy = (i: DisruptionInput): RolloutStrategy =>
  payloadBlockers(i).length > 0 ? 'Rollout' : strategyOf('config', i.upgradeType);

function payloadChanges(i: WhyInput): RolloutChange[] {
  if (i.from === i.to) return [];
  const blockers = payloadBlockers(i);
  const strategy = payloadStrategy(i);
  const why =
    blockers.length > 0
      ? ` (the new payload holds ${blockers.join(', ')}, which the node agent cannot apply in place: the Machines are replaced)`
      : '';
  if (!i.before || !i.after)
    return [
      {
        input: 'config',
        detail: `hash ${i.from} to ${i.to}: the inputs of ${i.from} are no longer known (its token Secret is gone)${why}`,
        strategy,
      },
    ];
  const changes: RolloutChange[] = [];
  if (i.before.release !== i.after.release)
    changes.push({ input: 'release', detail: `${i.before.release} to ${i.after.release}${why}`, strategy });
  if (i.before.config !== i.after.config) {
    for (const d of documentChanges(i.before.config, i.after.config, documentSources(i.configMaps))) {
      const where = d.configMaps.length > 0 ? ` in ConfigMap ${d.configMaps.join(', ')}` : '';
      changes.push({ input: 'config', detail: `${d.kind} ${d.name} ${d.change}${where}${why}`, strategy });
    }
  }
  return changes;
}

/** What the disruption of a payload change is judged on. */
export type DisruptionInput = Pick<
  WhyInput,
  'upgradeType' | 'engine' | 'from' | 'to' | 'before' | 'after' | 'disruptionPolicy'
>;

/** What each node of an in-place payload change does (disruption-config.ts), capped as the CRD caps it; none
 * when the engine replaces the Machines or the inputs are no longer known. The rollout gate reads it too: a
 * change that neither drains nor reboots is not held by the maintenance window. */
export function rolloutDisruption(i: DisruptionInput): RolloutDisruption | undefined {
  if (!i.disruptionPolicy || !i.before || !i.after || i.from === i.to || payloadStrategy(i) !== 'InPlace')
    return undefined;
  const { changes, disruption } = configDisruption(i.disruptionPolicy, i.before, i.after);
  return {
    action: describeDisruption(disruption),
    drain: disruption.drain,
    reboot: disruption.reboot,
    changes: changes.slice(0, MAX_CHANGES),
  };
}

/** The record of a rollout: every input that changed, with its strategy. */
export function explainRollout(i: WhyInput): RolloutRecord {
  const changes = payloadChanges(i);
  if (i.template)
    changes.push({
      input: 'template',
      detail: `${i.template.from} to ${i.template.to}`,
      strategy: strategyOf('template', i.upgradeType, i.engine),
    });
  if (changes.length > MAX_CHANGES)
    changes.splice(MAX_CHANGES - 1, changes.length, {
      input: 'config',
      detail: `and ${changes.length - MAX_CHANGES + 1} more changes`,
      strategy: payloadStrategy(i),
    });
  const disruption = rolloutDisruption(i);
  return { from: i.from, to: i.to, since: i.now, changes, ...(disruption ? { disruption } : {}) };
}

const templateOf = (r: RolloutRecord): string | undefined => r.changes.find((c) => c.input === 'template')?.detail;

/** The record to keep: the stored one while it is about the same rollout (hashes and template), else a new one. */
export function keepOrExplain(stored: RolloutRecord | undefined, i: WhyInput): RolloutRecord {
  const template = i.template ? `${i.template.from} to ${i.template.to}` : undefined;
  if (stored && stored.from === i.from && stored.to === i.to && templateOf(stored) === template) return stored;
  return explainRollout(i);
}

/**
 * Node disruption policies: which action a change of an in-place update needs, per file path (exact or
 * prefix), per systemd unit and for users' SSH keys, and the least action that covers a whole change set.
 * One rule set, read by the agent (it runs that action), the nodepool-controller (status.rollout) and
 * `kindling plan`, so what is shown and what is done never disagree.
 *
 * A pool's spec.management.inPlace.disruptionPolicy is laid over DEFAULT_DISRUPTION_POLICY: an entry for
 * the same path (and match) or unit replaces the default's, sshKeys replaces the default's. Anything no entry
 * names needs Reboot (which drains first): the agent cannot know which running process reads it.
 */

export type DisruptionAction =
  | { type: 'None' }
  | { type: 'Reload'; unit: string }
  | { type: 'Restart'; unit: string }
  | { type: 'DaemonReload' }
  | { type: 'Drain' }
  | { type: 'Reboot' };

type PathMatch = 'Exact' | 'Prefix';

interface FileDisruption {
  path: string;
  /** Exact by default; Prefix: every path under it (a longer prefix, and an exact entry, win). */
  match?: PathMatch;
  actions: DisruptionAction[];
}

interface UnitDisruption {
  /** A unit name such as kubelet.service: its unit file, drop-ins and enablement links. */
  name: string;
  actions: DisruptionAction[];
}

/** spec.management.inPlace.disruptionPolicy. */
export interface DisruptionPolicy {
  files?: FileDisruption[];
  units?: UnitDisruption[];
  sshKeys?: { actions: DisruptionAction[] };
}

/** A policy with the defaults laid under it: what reaches the agent. */
export interface EffectiveDisruptionPolicy {
  files: (FileDisruption & { match: PathMatch })[];
  units: UnitDisruption[];
  sshKeys: { actions: DisruptionAction[] };
}

/** The runtime unit that re-reads registry configuration on reload. */
const RUNTIME_UNIT = 'crio.service';
const KUBELET_UNIT = 'kubelet.service';

const reloadRuntime: DisruptionAction[] = [{ type: 'Reload', unit: RUNTIME_UNIT }];

/**
 * As the machine-config operator's defaults: SSH keys are read at each login; registry mirrors, signature
 * policy and the pull secret are read by the runtime (reload) or at each pull; the kubelet reads its config
 * only when it starts.
 */
export const DEFAULT_DISRUPTION_POLICY: EffectiveDisruptionPolicy = Object.freeze({
  files: [
    { path: '/etc/containers/registries.conf', match: 'Exact', actions: reloadRuntime },
    { path: '/etc/containers/policy.json', match: 'Exact', actions: reloadRuntime },
    { path: '/etc/containers/registries.d/', match: 'Prefix', actions: reloadRuntime },
    { path: '/var/lib/kubelet/config.json', match: 'Exact', actions: [{ type: 'None' }] },
    { path: '/etc/kubernetes/kubelet.conf', match: 'Exact', actions: [{ type: 'Restart', unit: KUBELET_UNIT }] },
  ],
  units: [],
  sshKeys: { actions: [{ type: 'None' }] },
}) as EffectiveDisruptionPolicy;

const fileKey = (f: { path: string }): string => f.path;

/** The pool's policy over the defaults (see the top of this file). */
export function effectiveDisruptionPolicy(policy: DisruptionPolicy | undefined): EffectiveDisruptionPolicy {
  const files = (policy?.files ?? []).map((f) => ({ ...f, match: f.match ?? ('Exact' as const) }));
  const overridden = new Set(files.map(fileKey));
  const units = policy?.units ?? [];
  const named = new Set(units.map((u) => u.name));
  return {
    files: [...DEFAULT_DISRUPTION_POLICY.files.filter((f) => !overridden.has(fileKey(f))), ...files],
    units: [...DEFAULT_DISRUPTION_POLICY.units.filter((u) => !named.has(u.name)), ...units],
    sshKeys: policy?.sshKeys ?? DEFAULT_DISRUPTION_POLICY.sshKeys,
  };
}

/** What one change touches, as the policy names it. */
export type ChangeTarget = { kind: 'file'; path: string } | { kind: 'unit'; name: string } | { kind: 'sshKeys' };

const REBOOT: DisruptionAction[] = [{ type: 'Reboot' }];

function underPrefix(path: string, prefix: string): boolean {
  return path === prefix || path.startsWith(prefix.endsWith('/') ? prefix : `${prefix}/`);
}

function fileActions(policy: EffectiveDisruptionPolicy, path: string): DisruptionAction[] {
  const exact = policy.files.find((f) => f.match === 'Exact' && f.path === path);
  if (exact) return exact.actions;
  const prefixes = policy.files.filter((f) => f.match === 'Prefix' && underPrefix(path, f.path));
  const longest = prefixes.sort((a, b) => b.path.length - a.path.length)[0];
  return longest?.actions ?? REBOOT;
}

/** The actions the policy gives one change (Reboot when nothing names it). */
export function actionsFor(policy: EffectiveDisruptionPolicy, target: ChangeTarget): DisruptionAction[] {
  switch (target.kind) {
    case 'sshKeys':
      return policy.sshKeys.actions;
    case 'unit':
      return policy.units.find((u) => u.name === target.name)?.actions ?? REBOOT;
    default:
      return fileActions(policy, target.path);
  }
}

/** The least a change set needs: a reboot (after a drain) covers everything; else each unit action once. */
export interface Disruption {
  drain: boolean;
  reboot: boolean;
  daemonReload: boolean;
  /** Units to reload, then units to restart (a restart covers a reload of the same unit); sorted. */
  reload: string[];
  restart: string[];
}

export const NO_DISRUPTION: Disruption = Object.freeze({
  drain: false,
  reboot: false,
  daemonReload: false,
  reload: [],
  restart: [],
});

/** The least action covering every change: a unit file changed without a reboot also needs a daemon-reload. */
export function leastDisruption(policy: EffectiveDisruptionPolicy, targets: readonly ChangeTarget[]): Disruption {
  const actions = targets.flatMap((t) => {
    const own = actionsFor(policy, t);
    return t.kind === 'unit' ? [...own, { type: 'DaemonReload' } as const] : own;
  });
  if (actions.some((a) => a.type === 'Reboot')) return { ...NO_DISRUPTION, drain: true, reboot: true };
  const units = (type: 'Reload' | 'Restart'): string[] => [
    ...new Set(actions.flatMap((a) => (a.type === type ? [a.unit] : []))),
  ];
  const restart = units('Restart').sort();
  return {
    drain: actions.some((a) => a.type === 'Drain'),
    reboot: false,
    daemonReload: actions.some((a) => a.type === 'DaemonReload'),
    reload: units('Reload')
      .filter((u) => !restart.includes(u))
      .sort(),
    restart,
  };
}

/** One action as a person reads it: "Restart kubelet.service". */
export function describeAction(action: DisruptionAction): string {
  return action.type === 'Reload' || action.type === 'Restart' ? `${action.type} ${action.unit}` : action.type;
}

/** A whole disruption as a person reads it: "drain, reboot" or "daemon-reload, restart kubelet.service" or "none". */
export function describeDisruption(d: Disruption): string {
  if (d.reboot) return 'drain, reboot';
  const parts = [
    ...(d.drain ? ['drain'] : []),
    ...(d.daemonReload ? ['daemon-reload'] : []),
    ...d.reload.map((u) => `reload ${u}`),
    ...d.restart.map((u) => `restart ${u}`),
  ];
  return parts.length > 0 ? parts.join(', ') : 'none';
}

/**
 * A policy as written in JSON (the payload Secret's key, the pool's child annotation), checked: undefined
 * input gives the defaults; anything malformed throws an Error that says what is wrong.
 */
export function parseEffectivePolicy(text: string | undefined): EffectiveDisruptionPolicy {
  if (text === undefined || text === '') return DEFAULT_DISRUPTION_POLICY;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new Error(`the disruption policy is not JSON: ${(err as Error).message}`, { cause: err });
  }
  const p = value as Partial<EffectiveDisruptionPolicy>;
  const problem = policyProblem(p);
  if (problem) throw new Error(`the disruption policy is invalid: ${problem}`);
  return effectiveDisruptionPolicy(p);
}

/**
 * A systemd unit name as the CRD accepts it. Checked again here because the agent passes it to systemctl as an
 * argument: one starting with "-" would be read as an option.
 */
const UNIT_NAME =
  /^[A-Za-z0-9:_.\\][A-Za-z0-9:_.\\-]*(@[A-Za-z0-9:_.\\-]*)?\.(service|socket|device|mount|automount|swap|target|path|timer|slice|scope)$/;

const ACTION_TYPES = new Set(['None', 'Reload', 'Restart', 'DaemonReload', 'Drain', 'Reboot']);

function actionsProblem(where: string, actions: unknown): string | undefined {
  if (!Array.isArray(actions)) return `${where}.actions is not a list`;
  return (actions as unknown[]).map((a) => actionProblem(where, a)).find(Boolean);
}

function actionProblem(where: string, value: unknown): string | undefined {
  const a = (typeof value === 'object' && value !== null ? value : {}) as { type?: unknown; unit?: unknown };
  if (typeof a.type !== 'string' || !ACTION_TYPES.has(a.type))
    return `${where}: unknown action ${JSON.stringify(a.type)}`;
  if (a.type !== 'Reload' && a.type !== 'Restart') return undefined;
  if (typeof a.unit === 'string' && UNIT_NAME.test(a.unit)) return undefined;
  return `${where}: ${a.type} needs a unit name such as kubelet.service, not ${JSON.stringify(a.unit)}`;
}

function policyProblem(p: Partial<EffectiveDisruptionPolicy>): string | undefined {
  if (typeof p !== 'object' || p === null) return 'not an object';
  const lists: [string, { actions: unknown }[] | undefined][] = [
    ['files', p.files],
    ['units', p.units],
  ];
  for (const [name, list] of lists) {
    if (list === undefined) continue;
    if (!Array.isArray(list)) return `${name} is not a list`;
    const found = list.map((e, i) => actionsProblem(`${name}[${i}]`, e?.actions)).find(Boolean);
    if (found) return found;
  }
  return p.sshKeys === undefined ? undefined : actionsProblem('sshKeys', p.sshKeys.actions);
}

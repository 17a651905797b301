/** The text form of a plan, laid out like `kubeadm upgrade plan`: verdicts first, then what changes and how. */
import type { Action, Effect, Plan } from './plan-model.js';
import { describeDisruption } from '../../api/src/disruption.js';

/** Columns padded to their widest cell; the last column is not padded. */
export function table(rows: readonly string[][], indent = '  '): string[] {
  const widths = rows.reduce<number[]>((w, r) => r.map((c, i) => Math.max(w[i] ?? 0, c.length)), []);
  return rows.map(
    (r) =>
      indent +
      r
        .map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i] ?? 0)))
        .join('  ')
        .trimEnd(),
  );
}

const EFFECTS: Record<Effect, string> = {
  propagate: 'propagates in place (no rollout)',
  'update-in-place': 'updates the nodes in place',
  replace: 'replaces the Machines',
  'new-machines': 'new Machines only',
};

const child = (p: Plan): string =>
  p.pool.upgradeType === 'InPlace' && !p.clusterApi ? 'MachineSet' : 'MachineDeployment';

const startsNow = (s: NonNullable<Plan['starts']>): string =>
  s.reason === 'HealthGateOverridden' ? `now (${s.message})` : 'now';

function header(p: Plan): string[] {
  const release = [
    p.release.version,
    p.release.currentVersion ? `the nodes run ${p.release.currentVersion}` : undefined,
  ]
    .filter(Boolean)
    .join('; ');
  const rows = [
    ['Release:', `${p.release.image}${release ? ` (${release})` : ''}`],
    ['Control plane:', p.controlPlane.version ?? `unknown: ${p.controlPlane.error ?? 'not checked'}`],
    ...(p.paused
      ? [
          [
            'Paused:',
            p.paused === 'true'
              ? 'yes (spec.pausedUntil): nothing applies until it is unset'
              : `until ${p.paused}: nothing applies until then`,
          ],
        ]
      : []),
    ...(p.starts ? [['Starts:', p.starts.now ? startsNow(p.starts) : `not yet: ${p.starts.message}`]] : []),
  ];
  const exists = p.pool.exists ? '' : ', not created yet';
  return [
    `NodePool ${p.pool.namespace}/${p.pool.name} (${p.pool.upgradeType}, cluster ${p.pool.cluster}${exists})`,
    '',
    ...table(rows, ''),
  ];
}

function policies(p: Plan): string[] {
  const rows = p.policies.map((x) => [
    `[${x.status.toUpperCase()}]`,
    x.skippable ? `${x.name} (skippable: ${x.skippable})` : x.name,
    x.message,
  ]);
  return ['', 'Policies:', ...table(rows)];
}

function hash(p: Plan): string[] {
  const h = p.configHash;
  if (!h.target) return ['', `Config hash:  ${h.current ?? '(none)'} (no new hash: the release or config is invalid)`];
  if (!h.changed) return ['', `Config hash:  ${h.target} (unchanged)`];
  const rows: string[][] = [];
  if (h.release)
    rows.push(['release', h.release.from === undefined ? h.release.to : `${h.release.from} → ${h.release.to}`]);
  for (const d of h.documents)
    rows.push([
      'config',
      `${d.kind} ${d.name} ${d.change}${d.configMaps.length > 0 ? ` (ConfigMap ${d.configMaps.join(', ')})` : ''}`,
    ]);
  if (rows.length === 0) rows.push(['inputs', 'the inputs of the current hash are gone (its token Secret expired)']);
  return ['', `Config hash:  ${h.current ?? '(none)'} → ${h.target}, changed by:`, ...table(rows, '  ')];
}

function changes(p: Plan): string[] {
  const out: string[] = [];
  if (p.changes.length > 0) {
    const rows = p.changes.map((c) => [c.what, EFFECTS[c.effect], `${c.from ?? ''} → ${c.to ?? ''}`]);
    out.push('', `Changes to the ${child(p)} ${p.pool.name}:`, ...table(rows));
  }
  const { machines, nodes, guestError } = p.propagation;
  if (machines.length > 0 || nodes.length > 0) {
    out.push(
      '',
      `Labels, taints and timeouts reach ${machines.length} Machines and ${nodes.length} Nodes in place (no rollout).`,
    );
  }
  if (guestError) out.push('', `Guest Nodes not read: ${guestError}`);
  return out;
}

function inPlace(p: Plan): string[] {
  const ip = p.inPlace;
  if (!ip) return [];
  const rows = [
    ['BATCH', 'NODE', 'ZONE', 'NOW'],
    ...ip.nodes.map((n) => [
      n.batch === 0 ? '-' : String(n.batch),
      n.name,
      n.zone || '-',
      `${n.phase}${n.unavailable ? ', unavailable' : ''}`,
    ]),
  ];
  const out = [
    '',
    `In-place rollout to config hash ${ip.targetHash}: ${ip.nodes.length} nodes in ${ip.batches.length} batches, at most ${ip.maxUnavailable} unavailable at once`,
    ...table(rows),
  ];
  if (ip.machinesWithoutNode > 0)
    out.push(`  ${ip.machinesWithoutNode} Machines have no Node yet: they boot the new config from their user-data.`);
  if (ip.halted) out.push(`  The rollout halts on degraded node ${ip.halted.node}: ${ip.halted.reason}`);
  if (ip.stalled) out.push(`  The rollout stalls: ${ip.stalled}`);
  return out;
}

function disruption(p: Plan): string[] {
  const d = p.disruption;
  if (!d) return [];
  const rows = [['CHANGED', 'ACTIONS (disruption policy)'], ...d.changes.map((c) => [c.target, c.actions])];
  const each = describeDisruption(d.disruption);
  const quiet = d.disruption.drain ? '' : d.disruption.reboot ? '' : ' (no cordon, no drain, no reboot)';
  return ['', 'Disruption of each node:', ...table(rows), `  Each node: ${each}${quiet}.`];
}

function clusterApi(p: Plan): string[] {
  const c = p.clusterApi;
  if (!c) return [];
  const label: Record<string, string> = { 'in-place': 'in place', propagated: 'propagated', rollout: 'must roll' };
  const rows = [
    ['VERDICT', 'FIELD', 'WHY'],
    ...c.changes.map((x) => [label[x.verdict] ?? x.verdict, x.field, x.reason]),
  ];
  return [
    '',
    `Cluster API in-place engine: Kindling's extension would answer ${c.inPlace ? 'IN PLACE' : 'ROLL OUT'}:`,
    ...table(rows),
  ];
}

function replace(p: Plan): string[] {
  const r = p.replace;
  if (!r) return [];
  const machines = r.machines.length > 0 ? r.machines.join(', ') : '(none yet)';
  if (r.strategy === 'OnDelete')
    return [
      '',
      `Replacement (OnDelete): Cluster API replaces a Machine only when you delete it. Stale Machines: ${machines}`,
    ];
  return [
    '',
    `Replacement (RollingUpdate, maxSurge ${r.maxSurge}, maxUnavailable ${r.maxUnavailable}, ${r.replicas} replicas):`,
    `  at most ${r.maxMachines} Machines, at least ${r.minAvailable} available; ${r.machines.length} Machines replaced in about ${r.waves} waves`,
    `  Machines replaced: ${machines}`,
  ];
}

const ACTIONS: Record<Action, (p: Plan) => string> = {
  none: () => 'NONE: nothing would change.',
  create: (p) => `CREATE: the controller creates the ${child(p)} at config hash ${p.configHash.target ?? ''}.`,
  propagate: (p) =>
    `PROPAGATE IN PLACE: no Machine is replaced and no node is updated; the config hash stays ${p.configHash.target ?? ''}.`,
  'update-in-place': (p) =>
    p.clusterApi
      ? `UPDATE IN PLACE: Cluster API updates the Machines to config hash ${p.configHash.target ?? ''} through Kindling's extension (UpdateMachine), under the MachineDeployment's maxSurge/maxUnavailable; no Machine is replaced.`
      : `UPDATE IN PLACE: the upgrader moves ${p.inPlace?.nodes.length ?? 0} nodes to config hash ${p.configHash.target ?? ''}; no Machine is replaced.`,
  replace: (p) =>
    `REPLACE: Cluster API rolls the MachineDeployment; ${p.replace?.machines.length ?? 0} Machines are replaced.`,
  blocked: (p) => `BLOCKED: ${p.blockedReason ?? 'a policy refuses the change'}.`,
};

function upgradeTargets(p: Plan): string[] {
  const u = p.upgradeTargets;
  if (!u) return [];
  const title = `Upgrade targets in ${u.repository}${u.current ? ` above ${u.current}` : ''}`;
  if (u.error !== undefined) return ['', `${title}: not listed (${u.error})`];
  if (u.targets.length === 0) return ['', `${title}: none`];
  const rows = u.targets.map((t) => [`[${t.status.toUpperCase()}]`, t.tag, t.reason ?? '', t.message]);
  return ['', `${title}:`, ...table(rows)];
}

export function formatPlan(p: Plan): string {
  const lines = [
    ...header(p),
    ...policies(p),
    ...upgradeTargets(p),
    ...hash(p),
    ...changes(p),
    ...clusterApi(p),
    ...disruption(p),
    ...inPlace(p),
    ...replace(p),
    '',
    `Action: ${ACTIONS[p.action](p)}`,
  ];
  if (p.action === 'update-in-place' && !p.inPlace && !p.clusterApi)
    lines.push('(the MachineSet does not exist yet: nothing to update)');
  lines.push('', 'Nothing was changed.');
  return `${lines.join('\n')}\n`;
}

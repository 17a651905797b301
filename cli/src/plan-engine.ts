/**
 * `kindling plan` for a pool on the ClusterAPI in-place engine: what Cluster API would be told by Kindling's
 * extension, from the extension's own decision function (decide.ts) over the objects Cluster API would send:
 * the live and desired MachineDeployment templates, the pool's bootstrap templates at both hashes (pure, as
 * the controller writes them) and the infrastructure templates they name. Two things plan cannot read as the
 * extension does: the infrastructure templates' contents (a change of reference is still seen), and the
 * release's own payload; whether the agent can apply the payload is judged on the pool's config documents,
 * with the agent's own rules.
 */
import type { MachineDeployment } from '../../api/src/capi.js';
import type { NodePool } from '../../api/src/nodepool.js';
import { desiredBootstrapTemplate, hashOfBootstrap } from '../../nodepool-controller/src/preview.js';
import { decide, inPlaceBlockers, type JsonObject, type Verdict } from '../../inplace-upgrader/src/preview.js';

export interface ClusterApiPlan {
  /** Every change is in place or propagated: Cluster API updates the Machines in place. */
  inPlace: boolean;
  /** The extension's answer, as Cluster API would log it. */
  message: string;
  changes: { field: string; verdict: Verdict; reason: string }[];
}

const isObject = (v: unknown): v is JsonObject => typeof v === 'object' && v !== null && !Array.isArray(v);

/** What the agent could not apply of the pool's config documents (MachineConfig fragments and kernel arguments). */
export function configBlockers(config: string): string[] {
  const docs = JSON.parse(config) as unknown[];
  return [
    ...new Set(
      docs.filter(isObject).flatMap((doc) => {
        const spec = isObject(doc.spec) ? doc.spec : {};
        const kargs = Array.isArray(spec.kernelArguments) && spec.kernelArguments.length > 0 ? ['kernelArguments'] : [];
        // The agent reads a whole Ignition config; a fragment's version is the renderer's business.
        const fragment = isObject(spec.config) ? { ...spec.config, ignition: { version: '3.4.0', ...(isObject(spec.config.ignition) ? spec.config.ignition : {}) } } : undefined;
        return [...kargs, ...(fragment ? inPlaceBlockers(JSON.stringify(fragment)) : [])];
      }),
    ),
  ];
}

/** An infrastructure template as far as plan knows it: its reference (its contents are not read). */
const infrastructure = (md: MachineDeployment): JsonObject => {
  const ref = md.spec.template.spec.infrastructureRef;
  return { kind: ref.kind, metadata: { name: ref.name }, spec: { template: { spec: {} } } };
};

export function clusterApiPlan(opts: { pool: NodePool; live: MachineDeployment; desired: MachineDeployment; targetHash: string; config?: string }): ClusterApiPlan {
  const name = opts.pool.metadata.name;
  const liveHash = hashOfBootstrap(name, opts.live.spec.template.spec.bootstrap);
  const bootstrap = (hash: string | undefined): JsonObject | undefined => (hash === undefined ? undefined : (desiredBootstrapTemplate(opts.pool, hash) as unknown as JsonObject));
  const d = decide({
    kind: 'MachineSet',
    current: { machine: opts.live as unknown as JsonObject, infrastructure: infrastructure(opts.live), bootstrap: bootstrap(liveHash) },
    desired: { machine: opts.desired as unknown as JsonObject, infrastructure: infrastructure(opts.desired), bootstrap: bootstrap(opts.targetHash) },
    ...(opts.config === undefined ? {} : { payload: { pool: name, hash: opts.targetHash, blockers: configBlockers(opts.config) } }),
  });
  return { inPlace: d.inPlace, message: d.message, changes: d.changes.map((c) => ({ field: c.field, verdict: c.verdict, reason: c.reason })) };
}

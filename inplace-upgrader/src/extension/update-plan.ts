/**
 * What Kindling's extension would tell Cluster API about a change of a pool on the ClusterAPI in-place engine
 * (CanUpdateMachineSet), for read-only callers (`kindling plan`): the extension's own decision function
 * (decide.ts) over the objects Cluster API would send: the live and desired MachineDeployment templates, the
 * pool's bootstrap templates at both hashes and the infrastructure templates they name. Two things a caller
 * without the extension's reads cannot give: the infrastructure templates' contents (a change of reference
 * is still seen), and the release's own payload; whether the agent can apply the payload is judged on the
 * pool's config documents, with the agent's own rules.
 */
import type { MachineDeployment } from '../../../api/src/capi.js';
import { documentsUnsupportedInPlace } from '../../../api/src/in-place.js';
import { decide, type Verdict } from './decide.js';
import type { JsonObject } from './hooks.js';

export interface ClusterApiPlan {
  /** Every change is in place or propagated: Cluster API updates the Machines in place. */
  inPlace: boolean;
  /** The extension's answer, as Cluster API would log it. */
  message: string;
  changes: { field: string; verdict: Verdict; reason: string }[];
}

export interface ClusterApiUpdateState {
  pool: string;
  /** The config hash the desired template points at. */
  targetHash: string;
  live: MachineDeployment;
  desired: MachineDeployment;
  /** The pool's bootstrap templates (KindlingConfigTemplate) the live and desired templates name, as the controller writes them. */
  bootstrap: { current?: JsonObject; desired?: JsonObject };
  /** The pool's normalised config documents (JSON), when known: what the payload is judged on. */
  config?: string;
}

/** An infrastructure template as far as a read-only caller knows it: its reference (its contents are not read). */
const infrastructure = (md: MachineDeployment): JsonObject => {
  const ref = md.spec.template.spec.infrastructureRef;
  return { kind: ref.kind, metadata: { name: ref.name }, spec: { template: { spec: {} } } };
};

/** The extension's answer to CanUpdateMachineSet for the change from the live to the desired MachineDeployment. */
export function previewClusterApiUpdate(state: ClusterApiUpdateState): ClusterApiPlan {
  const d = decide({
    kind: 'MachineSet',
    current: {
      machine: state.live as unknown as JsonObject,
      infrastructure: infrastructure(state.live),
      bootstrap: state.bootstrap.current,
    },
    desired: {
      machine: state.desired as unknown as JsonObject,
      infrastructure: infrastructure(state.desired),
      bootstrap: state.bootstrap.desired,
    },
    ...(state.config === undefined
      ? {}
      : { payload: { pool: state.pool, hash: state.targetHash, blockers: documentsUnsupportedInPlace(state.config) } }),
  });
  return {
    inPlace: d.inPlace,
    message: d.message,
    changes: d.changes.map((c) => ({ field: c.field, verdict: c.verdict, reason: c.reason })),
  };
}

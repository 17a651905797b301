/**
 * LocalMachine controller: each LocalMachine becomes a host, a folder under the state folder that is its root
 * filesystem. Once its Machine has bootstrap data, the host boots with the real Ignition client and joins the
 * guest cluster as a Node (KWOK keeps it alive) with the LocalMachine's providerID, zone and the Machine's
 * taints, as a kubelet would register it. A failed boot shows on the LocalMachine and is retried with backoff.
 */
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import * as k8s from '@kubernetes/client-node';
import { LABELS } from '../../../api/src/keys.js';
import { NotReadyError, isNotFound } from '../../../support/src/errors.js';
import type { Logger } from '../../../support/src/logger.js';
import { bootHost } from './boot.js';
import { guestClient, type ProviderContext, setCondition, type ObjectCondition } from './common.js';

export const LOCAL_MACHINE_FINALIZER = 'infrastructure.kindling.dev/local-machine';
export const INFRA_API_VERSION = 'infrastructure.kindling.dev/v1alpha1';

export interface LocalMachine extends k8s.KubernetesObject {
  metadata: k8s.V1ObjectMeta & { name: string; namespace: string };
  spec?: { providerID?: string; failureDomain?: string; failureDomains?: string[] };
  status?: {
    initialization?: { provisioned?: boolean };
    addresses?: { type: string; address: string }[];
    hostRoot?: string;
    conditions?: ObjectCondition[];
  };
}

interface MachineView {
  metadata?: k8s.V1ObjectMeta;
  spec?: { bootstrap?: { dataSecretName?: string }; taints?: { key: string; value?: string; effect: string }[] };
}

export const providerIDOf = (lm: LocalMachine): string => `kindling-local://${lm.metadata.namespace}/${lm.metadata.name}`;
/** A host's root folder: <state>/hosts/<management namespace>/<LocalMachine name> (the Node has its name). */
export const hostRootFor = (stateDir: string, namespace: string, name: string): string => join(stateDir, 'hosts', namespace, name);
export const hostRootOf = (stateDir: string, lm: LocalMachine): string => hostRootFor(stateDir, lm.metadata.namespace, lm.metadata.name);

/**
 * The zone for a new host: one of the template's zones least used by its siblings. Siblings still choosing
 * (booting at the same moment) take the least-used zones in turn by name order, so concurrent hosts spread
 * too without seeing each other's choice.
 */
export function pickZone(zones: readonly string[], siblings: readonly LocalMachine[], self: string): string | undefined {
  if (zones.length === 0) return undefined;
  const used = new Map(zones.map((z) => [z, 0]));
  for (const s of siblings) {
    const z = s.spec?.failureDomain;
    if (z !== undefined && used.has(z)) used.set(z, (used.get(z) ?? 0) + 1);
  }
  const least = Math.min(...used.values());
  const candidates = zones.filter((z) => used.get(z) === least);
  const choosing = [self, ...siblings.filter((s) => s.spec?.failureDomain === undefined).map((s) => s.metadata.name)].sort();
  return candidates[choosing.indexOf(self) % candidates.length];
}

/** The Node a kubelet on this host would register. */
export function desiredNode(lm: LocalMachine, machine: MachineView, zone: string | undefined): k8s.V1Node {
  const labels: Record<string, string> = { 'kubernetes.io/hostname': lm.metadata.name, 'kindling.dev/host': 'local' };
  if (zone) labels[LABELS.zone] = zone;
  return {
    metadata: { name: lm.metadata.name, labels },
    spec: {
      providerID: providerIDOf(lm),
      taints: (machine.spec?.taints ?? []).map((t) => ({ key: t.key, value: t.value, effect: t.effect })),
    },
  };
}

function bootstrapDataOf(machine: MachineView): string {
  const name = machine.spec?.bootstrap?.dataSecretName;
  if (!name) throw new NotReadyError('waiting for the Machine to have bootstrap data', 2000);
  return name;
}

export class LocalMachineReconciler {
  constructor(private readonly ctx: ProviderContext) {}

  async reconcile(lm: LocalMachine, log: Logger): Promise<void> {
    if (lm.metadata.deletionTimestamp) return this.#delete(lm, log);
    await this.#ensureFinalizer(lm);
    if (lm.status?.initialization?.provisioned === true) return;
    const machine = await this.#ownerMachine(lm);
    const dataSecretName = bootstrapDataOf(machine);
    const zone = lm.spec?.failureDomain ?? pickZone(lm.spec?.failureDomains ?? [], this.ctx.siblings(lm), lm.metadata.name);
    await this.#boot(lm, { machine, dataSecretName, zone }, log);
  }

  async #boot(lm: LocalMachine, b: { machine: MachineView; dataSecretName: string; zone: string | undefined }, log: Logger): Promise<void> {
    const { zone } = b;
    const root = hostRootOf(this.ctx.stateDir, lm);
    try {
      const userData = await this.#userData(lm.metadata.namespace, b.dataSecretName);
      log.info({ root }, 'Booting host with the Ignition client');
      await bootHost({ root, userData });
      await this.#join(lm, b.machine, zone);
    } catch (err) {
      await this.#status(lm, { provisioned: false, root, condition: { status: 'False', reason: 'BootFailed', message: (err as Error).message } });
      throw err;
    }
    await this.#patch(lm, { spec: { providerID: providerIDOf(lm), ...(zone ? { failureDomain: zone } : {}) } });
    await this.#status(lm, { provisioned: true, root, condition: { status: 'True', reason: 'Booted', message: 'Host booted with Ignition and joined the cluster' } });
    log.info({ providerID: providerIDOf(lm), zone }, 'Host joined the guest cluster');
  }

  async #ownerMachine(lm: LocalMachine): Promise<MachineView> {
    const owner = lm.metadata.ownerReferences?.find((o) => o.kind === 'Machine');
    if (!owner) throw new NotReadyError('waiting for Cluster API to set the owner Machine', 2000);
    return this.ctx.objects.read({ apiVersion: owner.apiVersion, kind: 'Machine', metadata: { name: owner.name, namespace: lm.metadata.namespace } });
  }

  async #userData(namespace: string, name: string): Promise<string> {
    const secret = await this.ctx.core.readNamespacedSecret({ name, namespace });
    const value = secret.data?.value;
    if (!value) throw new NotReadyError(`bootstrap Secret ${namespace}/${name} has no value yet`, 2000);
    return Buffer.from(value, 'base64').toString();
  }

  async #join(lm: LocalMachine, machine: MachineView, zone: string | undefined): Promise<void> {
    const cluster = lm.metadata.labels?.[LABELS.capiClusterName];
    if (!cluster) throw new NotReadyError('waiting for the cluster-name label', 2000);
    const guest = await guestClient(this.ctx, lm.metadata.namespace, cluster);
    const node = desiredNode(lm, machine, zone);
    await guest.createNode({ body: node }).catch((err: { code?: number }) => {
      if (err.code !== 409) throw err;
    });
  }

  async #delete(lm: LocalMachine, log: Logger): Promise<void> {
    await rm(hostRootOf(this.ctx.stateDir, lm), { recursive: true, force: true });
    log.info('Host removed');
    const finalizers = (lm.metadata.finalizers ?? []).filter((f) => f !== LOCAL_MACHINE_FINALIZER);
    await this.#patch(lm, { metadata: { finalizers } }).catch((err) => {
      if (!isNotFound(err)) throw err;
    });
  }

  async #ensureFinalizer(lm: LocalMachine): Promise<void> {
    if (lm.metadata.finalizers?.includes(LOCAL_MACHINE_FINALIZER)) return;
    await this.#patch(lm, { metadata: { finalizers: [...(lm.metadata.finalizers ?? []), LOCAL_MACHINE_FINALIZER] } });
  }

  async #patch(lm: LocalMachine, body: object): Promise<void> {
    await this.ctx.custom.patchNamespacedCustomObject(
      { group: 'infrastructure.kindling.dev', version: 'v1alpha1', namespace: lm.metadata.namespace, plural: 'localmachines', name: lm.metadata.name, body },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
  }

  async #status(lm: LocalMachine, s: { provisioned: boolean; root: string; condition: Omit<ObjectCondition, 'type' | 'lastTransitionTime'> }): Promise<void> {
    const status = {
      initialization: { provisioned: s.provisioned },
      hostRoot: s.root,
      ...(s.provisioned ? { addresses: [{ type: 'InternalIP', address: '127.0.0.1' }, { type: 'Hostname', address: lm.metadata.name }] } : {}),
      conditions: setCondition(lm.status?.conditions ?? [], { type: 'Booted', ...s.condition }),
    };
    await this.ctx.custom.patchNamespacedCustomObjectStatus(
      { group: 'infrastructure.kindling.dev', version: 'v1alpha1', namespace: lm.metadata.namespace, plural: 'localmachines', name: lm.metadata.name, body: { status } },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
  }
}

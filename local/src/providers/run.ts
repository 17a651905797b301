/** Runs the local providers' controllers: LocalMachine and LocalControlPlane, each a support/ controller (one informer, one key queue). */
import * as k8s from '#k8s';
import { LABELS } from '../../../api/src/keys.js';
import { createController, type Controller } from '../../../support/src/controller.js';
import { customResource, type Informer } from '../../../support/src/namespaced-informer.js';
import type { Logger } from '../../../support/src/logger.js';
import type { ProviderContext } from './common.js';
import { LocalMachineReconciler, hostRootFor, type LocalMachine } from './local-machine.js';
import { startHostAgents } from './host-agents.js';
import { LocalControlPlaneReconciler, type LocalControlPlane } from './control-plane.js';
import { parseKey } from '../../../support/src/object-key.js';

export interface Providers {
  stop(): Promise<void>;
}

const keyOf = (o: k8s.KubernetesObject): string => `${o.metadata?.namespace ?? ''}/${o.metadata?.name ?? ''}`;

function siblingsOf(all: LocalMachine[], lm: LocalMachine): LocalMachine[] {
  const group = (m: LocalMachine): string | undefined =>
    m.metadata.labels?.[LABELS.capiSetName] ?? m.metadata.labels?.[LABELS.capiDeploymentName];
  return all.filter(
    (m) =>
      m.metadata.namespace === lm.metadata.namespace && m.metadata.name !== lm.metadata.name && group(m) === group(lm),
  );
}

interface Controlled<T extends k8s.KubernetesObject> {
  informer: Informer<T>;
  controller: Controller;
}

function control<T extends k8s.KubernetesObject>(opts: {
  kc: k8s.KubeConfig;
  plural: string;
  group: string;
  log: Logger;
  reconcile: (obj: T, log: Logger) => Promise<void>;
}): Controlled<T> {
  const custom = opts.kc.makeApiClient(k8s.CustomObjectsApi);
  const controller = createController({
    name: opts.plural,
    log: opts.log,
    workers: 4,
    failureMessage: 'Reconcile failed; retrying',
    reconcile: async (key) => {
      const obj = informer.get(parseKey(key));
      if (obj) await opts.reconcile(obj, opts.log.child({ [opts.plural]: key }));
    },
  });
  const informer: Informer<T> = controller.watch<T>({
    kubeConfig: opts.kc,
    // The local providers stand for the infrastructure provider, which serves every namespace.
    namespaces: 'all',
    ...customResource<T>(custom, { group: opts.group, version: 'v1alpha1', plural: opts.plural }),
    toKeys: (o) => [keyOf(o)],
  });
  return { informer, controller };
}

/** A LocalCluster has nothing to provision: it is reported provisioned at once. */
async function provisionLocalCluster(
  custom: k8s.CustomObjectsApi,
  lc: k8s.KubernetesObject & { status?: { initialization?: { provisioned?: boolean } } },
): Promise<void> {
  if (lc.metadata?.deletionTimestamp || lc.status?.initialization?.provisioned === true) return;
  await custom.patchNamespacedCustomObjectStatus(
    {
      group: 'infrastructure.kindling.dev',
      version: 'v1alpha1',
      namespace: lc.metadata?.namespace ?? '',
      plural: 'localclusters',
      name: lc.metadata?.name ?? '',
      body: { status: { initialization: { provisioned: true } } },
    },
    k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
  );
}

export async function startProviders(opts: {
  kubeConfig: k8s.KubeConfig;
  stateDir: string;
  log: Logger;
}): Promise<Providers> {
  const kc = opts.kubeConfig;
  const ctx: ProviderContext & { kubeConfig: k8s.KubeConfig } = {
    kubeConfig: kc,
    stateDir: opts.stateDir,
    objects: k8s.KubernetesObjectApi.makeApiClient(kc),
    core: kc.makeApiClient(k8s.CoreV1Api),
    custom: kc.makeApiClient(k8s.CustomObjectsApi),
    siblings: (lm) => siblingsOf(machines.informer.list(), lm),
  };
  const machineReconciler = new LocalMachineReconciler(ctx);
  const cpReconciler = new LocalControlPlaneReconciler(ctx);
  const machines: Controlled<LocalMachine> = control<LocalMachine>({
    kc,
    plural: 'localmachines',
    group: 'infrastructure.kindling.dev',
    log: opts.log,
    reconcile: (o, l) => machineReconciler.reconcile(o, l),
  });
  const planes = control<LocalControlPlane>({
    kc,
    plural: 'localcontrolplanes',
    group: 'controlplane.kindling.dev',
    log: opts.log,
    reconcile: (o, l) => cpReconciler.reconcile(o, l),
  });
  const clusters = control<k8s.KubernetesObject & { status?: { initialization?: { provisioned?: boolean } } }>({
    kc,
    plural: 'localclusters',
    group: 'infrastructure.kindling.dev',
    log: opts.log,
    reconcile: (o) => provisionLocalCluster(ctx.custom, o),
  });
  const agents = startHostAgents({
    kubeConfig: kc,
    stateDir: opts.stateDir,
    log: opts.log.child({ part: 'host-agents' }),
    hostRoot: (ns, node) => hostRootFor(opts.stateDir, ns, node),
  });
  const controllers = [machines.controller, planes.controller, clusters.controller];
  await Promise.all([...controllers.map((c) => c.start()), agents.start()]);
  return {
    async stop() {
      await Promise.all([...controllers.map((c) => c.stop()), agents.stop()]);
      await machineReconciler.stop();
    },
  };
}

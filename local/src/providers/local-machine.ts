/**
 * LocalMachine controller: each LocalMachine becomes a host, a folder under the state folder that is its root
 * filesystem. Once its Machine has bootstrap data, the host boots with the real Ignition client, and the
 * LocalMachine reports provisioned with its providerID and addresses at once, as a cloud reports a running
 * instance. The host's own kubelet (kubelet.ts) then joins the guest cluster by TLS bootstrap with the join
 * material Ignition wrote, and says on the LocalMachine (condition Joined) how far it got. The provider never
 * creates the Node: the kubelet registers it with its own certificate. A failed boot shows on the
 * LocalMachine and is retried with backoff.
 */
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import * as k8s from '#k8s';
import { NotReadyError, isConflict, isNotFound } from '../../../support/src/errors.js';
import type { Logger } from '../../../support/src/logger.js';
import { realClock, type Clock } from '../../../support/src/timers.js';
import { bootHost } from './boot.js';
import { type LocalMachine, type ObjectCondition, type ProviderContext, setCondition } from './common.js';
import { Kubelet, type KubeletCondition, type KubeletTiming } from './kubelet/kubelet.js';

const LOCAL_MACHINE_FINALIZER = 'infrastructure.kindling.dev/local-machine';

export type { LocalMachine } from './common.js';

interface MachineView {
  metadata?: k8s.V1ObjectMeta;
  spec?: { bootstrap?: { dataSecretName?: string }; taints?: { key: string; value?: string; effect: string }[] };
}

const providerIDOf = (lm: LocalMachine): string => `kindling-local://${lm.metadata.namespace}/${lm.metadata.name}`;
/** A host's root folder: <state>/hosts/<management namespace>/<LocalMachine name> (the Node has its name). */
export const hostRootFor = (stateDir: string, namespace: string, name: string): string =>
  join(stateDir, 'hosts', namespace, name);
const hostRootOf = (stateDir: string, lm: LocalMachine): string =>
  hostRootFor(stateDir, lm.metadata.namespace, lm.metadata.name);

/**
 * The zone for a new host: one of the template's zones least used by its siblings. Siblings still choosing
 * (booting at the same moment) take the least-used zones in turn by name order, so concurrent hosts spread
 * too without seeing each other's choice.
 */
export function pickZone(
  zones: readonly string[],
  siblings: readonly LocalMachine[],
  self: string,
): string | undefined {
  if (zones.length === 0) return undefined;
  const used = new Map(zones.map((z) => [z, 0]));
  for (const s of siblings) {
    const z = s.spec?.failureDomain;
    if (z !== undefined && used.has(z)) used.set(z, (used.get(z) ?? 0) + 1);
  }
  const least = Math.min(...used.values());
  const candidates = zones.filter((z) => used.get(z) === least);
  const choosing = [
    self,
    ...siblings.filter((s) => s.spec?.failureDomain === undefined).map((s) => s.metadata.name),
  ].sort();
  return candidates[choosing.indexOf(self) % candidates.length];
}

function bootstrapDataOf(machine: MachineView): string {
  const name = machine.spec?.bootstrap?.dataSecretName;
  if (!name) throw new NotReadyError('waiting for the Machine to have bootstrap data', 2000);
  return name;
}

/** The addresses of a local host, as its infrastructure reports them (Cluster API copies them to the Machine). */
const hostAddresses = (lm: LocalMachine): { type: string; address: string }[] => [
  { type: 'InternalIP', address: '127.0.0.1' },
  { type: 'Hostname', address: lm.metadata.name },
];

const keyOf = (lm: LocalMachine): string => `${lm.metadata.namespace}/${lm.metadata.name}`;

export interface LocalMachineOptions {
  clock?: Clock;
  kubeletTiming?: Partial<KubeletTiming>;
}

export class LocalMachineReconciler {
  /** The running kubelet of each booted host, by `<namespace>/<name>`. */
  readonly #kubelets = new Map<string, { abort: AbortController; done: Promise<void> }>();

  constructor(
    private readonly ctx: ProviderContext,
    private readonly opts: LocalMachineOptions = {},
  ) {}

  async reconcile(lm: LocalMachine, log: Logger): Promise<void> {
    if (lm.metadata.deletionTimestamp) return this.#delete(lm, log);
    await this.#ensureFinalizer(lm);
    // A running kubelet means this process booted the host, whatever an informer cache a moment old says.
    if (this.#kubelets.has(keyOf(lm))) return;
    const provisioned = lm.status?.initialization?.provisioned === true;
    const machine = await this.#ownerMachine(lm);
    const zone = provisioned ? lm.spec?.failureDomain : await this.#boot(lm, machine, log);
    this.#startKubelet(lm, { machine, zone }, log);
  }

  /** Stops every kubelet (the providers are stopping; a restart resumes each from its host root). */
  async stop(): Promise<void> {
    const running = [...this.#kubelets.values()];
    this.#kubelets.clear();
    for (const k of running) k.abort.abort();
    await Promise.all(running.map((k) => k.done));
  }

  /** Boots the host and reports it provisioned; returns its zone. */
  async #boot(lm: LocalMachine, machine: MachineView, log: Logger): Promise<string | undefined> {
    const dataSecretName = bootstrapDataOf(machine);
    const zone =
      lm.spec?.failureDomain ?? pickZone(lm.spec?.failureDomains ?? [], this.ctx.siblings(lm), lm.metadata.name);
    const root = hostRootOf(this.ctx.stateDir, lm);
    try {
      const userData = await this.#userData(lm.metadata.namespace, dataSecretName);
      log.info({ root }, 'Booting host with the Ignition client');
      await bootHost({ root, userData });
    } catch (err) {
      await this.#status(lm, {
        provisioned: false,
        root,
        condition: { status: 'False', reason: 'BootFailed', message: (err as Error).message },
      });
      throw err;
    }
    // Provisioned before the kubelet asks to join: an approver matches the CSR against this Machine's addresses.
    await this.#patch(lm, { spec: { providerID: providerIDOf(lm), ...(zone ? { failureDomain: zone } : {}) } });
    await this.#status(lm, {
      provisioned: true,
      root,
      condition: { status: 'True', reason: 'Booted', message: 'Host booted with Ignition' },
    });
    log.info({ providerID: providerIDOf(lm), zone }, 'Host booted; its kubelet joins the guest cluster');
    return zone;
  }

  #startKubelet(lm: LocalMachine, b: { machine: MachineView; zone: string | undefined }, log: Logger): void {
    const key = keyOf(lm);
    if (this.#kubelets.has(key)) return;
    const abort = new AbortController();
    const kubelet = new Kubelet(
      {
        root: hostRootOf(this.ctx.stateDir, lm),
        nodeName: lm.metadata.name,
        providerID: providerIDOf(lm),
        zone: b.zone,
        taints: (b.machine.spec?.taints ?? []).map((t) => ({ key: t.key, value: t.value, effect: t.effect })),
      },
      {
        log: log.child({ part: 'kubelet' }),
        clock: this.opts.clock ?? realClock,
        signal: abort.signal,
        timing: this.opts.kubeletTiming,
        report: (condition) => this.#condition(lm, condition),
      },
    );
    const done = kubelet.run().catch((err: unknown) => log.error({ err }, 'Kubelet stopped on an unexpected error'));
    this.#kubelets.set(key, { abort, done });
  }

  async #ownerMachine(lm: LocalMachine): Promise<MachineView> {
    const owner = lm.metadata.ownerReferences?.find((o) => o.kind === 'Machine');
    if (!owner) throw new NotReadyError('waiting for Cluster API to set the owner Machine', 2000);
    return this.ctx.objects.read({
      apiVersion: owner.apiVersion,
      kind: 'Machine',
      metadata: { name: owner.name, namespace: lm.metadata.namespace },
    });
  }

  async #userData(namespace: string, name: string): Promise<string> {
    const secret = await this.ctx.core.readNamespacedSecret({ name, namespace });
    const value = secret.data?.value;
    if (!value) throw new NotReadyError(`bootstrap Secret ${namespace}/${name} has no value yet`, 2000);
    return Buffer.from(value, 'base64').toString();
  }

  async #delete(lm: LocalMachine, log: Logger): Promise<void> {
    const key = keyOf(lm);
    const kubelet = this.#kubelets.get(key);
    this.#kubelets.delete(key);
    kubelet?.abort.abort();
    await kubelet?.done;
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
      {
        group: 'infrastructure.kindling.dev',
        version: 'v1alpha1',
        namespace: lm.metadata.namespace,
        plural: 'localmachines',
        name: lm.metadata.name,
        body,
      },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
  }

  /** With a resourceVersion, the patch applies only over that version (409 otherwise). */
  async #patchStatus(lm: LocalMachine, status: object, resourceVersion?: string): Promise<void> {
    const body = { ...(resourceVersion ? { metadata: { resourceVersion } } : {}), status };
    await this.ctx.custom.patchNamespacedCustomObjectStatus(
      {
        group: 'infrastructure.kindling.dev',
        version: 'v1alpha1',
        namespace: lm.metadata.namespace,
        plural: 'localmachines',
        name: lm.metadata.name,
        body,
      },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
  }

  async #status(
    lm: LocalMachine,
    s: { provisioned: boolean; root: string; condition: Omit<ObjectCondition, 'type' | 'lastTransitionTime'> },
  ): Promise<void> {
    const fields = {
      initialization: { provisioned: s.provisioned },
      hostRoot: s.root,
      ...(s.provisioned ? { addresses: hostAddresses(lm) } : {}),
    };
    await this.#condition(lm, { type: 'Booted', ...s.condition }, fields);
  }

  /**
   * Records a condition (and other status fields) over the LocalMachine's current conditions, not the cached
   * object's, and only over the version read: the host's kubelet writes conditions of its own at any moment.
   */
  async #condition(lm: LocalMachine, condition: KubeletCondition, fields: object = {}): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      const current = (await this.ctx.custom.getNamespacedCustomObjectStatus({
        group: 'infrastructure.kindling.dev',
        version: 'v1alpha1',
        namespace: lm.metadata.namespace,
        plural: 'localmachines',
        name: lm.metadata.name,
      })) as LocalMachine;
      try {
        return await this.#patchStatus(
          lm,
          { ...fields, conditions: setCondition(current.status?.conditions ?? [], condition) },
          current.metadata.resourceVersion,
        );
      } catch (err) {
        if (!isConflict(err) || attempt >= 5) throw err;
      }
    }
  }
}

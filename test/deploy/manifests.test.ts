/**
 * deploy/: the kustomize base and the local overlay render with the test bed's kubectl, every rendered object is
 * accepted by a real kube-apiserver (server-side dry run), every Deployment's Pod passes the namespace's
 * `restricted` Pod Security level, and every container's arguments parse with its command's own flags. The
 * NetworkPolicies are asked who reaches each port of each component's pods, attackers included.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import * as k8s from '#k8s';
import { COMMANDS } from '../../cli/src/commands.js';
import { CRD_DIR } from '../../api/src/crd.js';
import type { ExtensionConfig } from '../../api/src/capi.js';
import { extensionConfig } from '../../inplace-upgrader/src/preview.js';
import { createApplier } from '../../support/src/apply.js';
import { loadCommand } from '../../support/src/command.js';
import { envName, parseConfig } from '../../support/src/config.js';
import {
  DEPLOY_BASE,
  KINDLING_NAMESPACE,
  LOCAL_OVERLAY,
  renderKustomization,
  tenantsOf,
} from '../../local/src/credentials.js';
import { eventually, installCapiCrds, startCluster, type Cluster } from '../bed/src/index.js';
import { admits, selecting, type NetworkPolicy, type PodRef, type Source, type Target } from './network-policy.js';

const RENDERS = { base: DEPLOY_BASE, 'overlays/local': LOCAL_OVERLAY } as const;
const COMPONENTS = ['nodepool-controller', 'ignition-server', 'inplace-upgrader', 'drainer'];

const ofKind = (objects: k8s.KubernetesObject[], kind: string): k8s.KubernetesObject[] =>
  objects.filter((o) => o.kind === kind);
const podSpecOf = (d: k8s.V1Deployment): k8s.V1PodSpec => d.spec?.template.spec as k8s.V1PodSpec;
const containerOf = (d: k8s.V1Deployment): k8s.V1Container => podSpecOf(d).containers[0] as k8s.V1Container;
/** A Pod of a Deployment's template, for Pod Security admission (which judges Pods, not Deployments). */
const podOf = (d: k8s.V1Deployment): k8s.V1Pod => ({
  metadata: { name: `${d.metadata?.name}-pod`, labels: d.spec?.template.metadata?.labels },
  spec: podSpecOf(d),
});

function assertComponent(objects: k8s.KubernetesObject[], where: string, component: string): void {
  const sa = `kindling-${component}`;
  const bindings = [...ofKind(objects, 'ClusterRoleBinding'), ...ofKind(objects, 'RoleBinding')] as k8s.V1RoleBinding[];
  assert.ok(
    ofKind(objects, 'ServiceAccount').some((o) => o.metadata?.name === sa),
    `${where}: ServiceAccount ${sa}`,
  );
  assert.ok(
    bindings.some((b) => b.subjects?.some((s) => s.name === sa && s.namespace === KINDLING_NAMESPACE)),
    `${where}: a binding of ${sa}`,
  );
  assertDeployment(
    ofKind(objects, 'Deployment').find((d) => d.metadata?.name === sa) as k8s.V1Deployment,
    `${where}/${sa}`,
    sa,
  );
}

function assertDeployment(deployment: k8s.V1Deployment, where: string, sa: string): void {
  const pod = podSpecOf(deployment);
  assert.equal(pod.serviceAccountName, sa);
  const c = containerOf(deployment);
  const { livenessProbe, readinessProbe, resources, securityContext } = c;
  assert.deepEqual(
    {
      readOnlyRoot: securityContext?.readOnlyRootFilesystem,
      nonRoot: pod.securityContext?.runAsNonRoot,
      probes: [livenessProbe?.httpGet?.path, readinessProbe?.httpGet?.path],
    },
    { readOnlyRoot: true, nonRoot: true, probes: ['/healthz', '/readyz'] },
    where,
  );
  assert.ok(resources?.requests?.memory, `${where}: memory request`);
  assert.ok(resources.limits?.memory, `${where}: memory limit`);
}

async function assertArguments(d: k8s.V1Deployment, where: string): Promise<void> {
  const c = containerOf(d);
  const [command, ...args] = c.args ?? [];
  const listed = COMMANDS.find((cmd) => cmd.name === command);
  assert.ok(listed, `${where}/${d.metadata?.name}: command ${command}`);
  const spec = await loadCommand(listed);
  const config = parseConfig(spec.flags, args, {}) as { opsAddress: string; leaderElect: boolean; agentImage?: string };
  assert.equal(config.opsAddress, '0.0.0.0:8080');
  assert.equal(config.leaderElect, true);
  // The agent Pods run `kindling agent` from the same image as the upgrader.
  if (command === 'inplace-upgrader') assert.equal(config.agentImage, c.image);
  // Flags given through the environment (from a ConfigMap) must be flags of the command: a misspelt one is ignored.
  const envFlags = new Set(Object.keys(spec.flags).map(envName));
  for (const e of c.env ?? [])
    if (e.name.startsWith('KINDLING_'))
      assert.ok(envFlags.has(e.name), `${where}/${d.metadata?.name}: ${e.name} is no flag of ${command}`);
}

/** A namespace's pod, its namespace labelled with its name as the apiserver labels every namespace. */
const podIn = (namespace: string, labels: Record<string, string> = {}, namespaceLabels = {}): PodRef => ({
  namespace,
  namespaceLabels: { 'kubernetes.io/metadata.name': namespace, ...namespaceLabels },
  labels,
});
/** The Cluster API core manager's pod as Cluster API's own manifests deploy it. */
const CAPI_MANAGER_LABELS = { 'cluster.x-k8s.io/provider': 'cluster-api', 'control-plane': 'controller-manager' };
/** The label an operator puts on the namespace of the metrics scraper (docs/deploying.md). */
const MONITORING_LABEL = { 'kindling.dev/monitoring': 'true' };
const SOURCES = {
  'the Cluster API manager': podIn('capi-system', CAPI_MANAGER_LABELS),
  "a tenant's pod wearing the Cluster API manager's labels": podIn('tenants', CAPI_MANAGER_LABELS),
  "the kubeadm bootstrap provider's manager": podIn('capi-kubeadm-bootstrap-system', {
    'cluster.x-k8s.io/provider': 'bootstrap-kubeadm',
    'control-plane': 'controller-manager',
  }),
  'another pod of capi-system': podIn('capi-system', { app: 'other' }),
  'a monitoring namespace': podIn('monitoring', { app: 'prometheus' }, MONITORING_LABEL),
  'an unlabelled monitoring namespace': podIn('monitoring', { app: 'prometheus' }),
  "a Kindling component's pod": podIn(KINDLING_NAMESPACE, { 'app.kubernetes.io/name': 'kindling-drainer' }),
  "a tenant's pod": podIn('tenants'),
  'a booting host outside the cluster': 'outside',
} satisfies Record<string, Source>;
type SourceName = keyof typeof SOURCES;

/** Per component and port name: the sources let in (every other source of SOURCES must be refused). */
const REACHES: Record<string, Record<string, SourceName[]>> = {
  'ignition-server': {
    https: Object.keys(SOURCES) as SourceName[],
    ops: ['a monitoring namespace'],
  },
  'inplace-upgrader': { extension: ['the Cluster API manager'], ops: ['a monitoring namespace'] },
  'nodepool-controller': { ops: ['a monitoring namespace'] },
  drainer: { ops: ['a monitoring namespace'] },
};

/** A pod of the Deployment as the policies see it: its namespace, template labels and container ports. */
const targetOf = (d: k8s.V1Deployment): Target => ({
  ...podIn(d.metadata?.namespace ?? ''),
  labels: d.spec?.template.metadata?.labels ?? {},
  ports: podSpecOf(d).containers.flatMap((c) => c.ports ?? []),
});

function assertReaches(objects: k8s.KubernetesObject[], where: string, component: string): void {
  const policies = ofKind(objects, 'NetworkPolicy') as NetworkPolicy[];
  const deployment = ofKind(objects, 'Deployment').find((d) => d.metadata?.name === `kindling-${component}`);
  const target = targetOf(deployment as k8s.V1Deployment);
  assert.deepEqual(
    target.ports.map((p) => p.name).sort(),
    Object.keys(REACHES[component] ?? {}).sort(),
    `${where}/${component}: the ports whose reach is asserted`,
  );
  for (const [portName, allowed] of Object.entries(REACHES[component] ?? {})) {
    const port = target.ports.find((p) => p.name === portName)?.containerPort ?? 0;
    const got = (Object.keys(SOURCES) as SourceName[]).filter((s) => admits(policies, SOURCES[s], target, port));
    assert.deepEqual(got, allowed, `${where}/${component}: who reaches port ${portName} (${port})`);
  }
}

/** The rendered kindling-tenants ConfigMap (its name has kustomize's hash) and the namespaces it lists. */
function tenantsList(objects: k8s.KubernetesObject[]): { name?: string; namespaces: string[] } {
  const map = (ofKind(objects, 'ConfigMap') as k8s.V1ConfigMap[]).find((c) =>
    c.metadata?.name?.startsWith('kindling-tenants-'),
  );
  const namespaces = (map?.data?.['namespaces'] ?? '').split(',').filter((n) => n !== '');
  return { name: map?.metadata?.name, namespaces };
}

/** Kindling's rights are granted per tenant namespace, and every component serves the same tenants. */
function assertTenancy(objects: k8s.KubernetesObject[], where: string): void {
  const clusterWide = (ofKind(objects, 'ClusterRoleBinding') as k8s.V1ClusterRoleBinding[]).filter((b) =>
    b.subjects?.some((s) => s.namespace === KINDLING_NAMESPACE),
  );
  assert.deepEqual(
    clusterWide.map((b) => b.metadata?.name),
    [],
    `${where}: ClusterRoleBindings of Kindling ServiceAccounts`,
  );
  const tenants = tenantsList(objects);
  assert.deepEqual(
    tenantsOf(objects),
    [...tenants.namespaces].sort(),
    `${where}: kindling-tenants and the tenant layers`,
  );
  for (const d of ofKind(objects, 'Deployment') as k8s.V1Deployment[]) {
    const from = containerOf(d).env?.find((e) => e.name === 'KINDLING_NAMESPACES')?.valueFrom;
    assert.equal(
      from?.configMapKeyRef?.name,
      tenants.name,
      `${where}/${d.metadata?.name}: --namespaces from kindling-tenants`,
    );
  }
}

describe('deploy/ manifests', () => {
  let mgmt: Cluster;
  const rendered: Record<string, k8s.KubernetesObject[]> = {};

  before(async () => {
    mgmt = await startCluster({ name: 'deploy', controllerManager: false });
    // The ExtensionConfig is a Cluster API kind.
    await installCapiCrds(mgmt);
    for (const [name, dir] of Object.entries(RENDERS)) rendered[name] = await renderKustomization(dir);
  });
  after(() => mgmt?.stop());

  it('when the base is rendered, it should hold the CRDs of api/crds unchanged', async () => {
    const files = (await readdir(CRD_DIR)).filter((f) => f.endsWith('.yaml')).sort();
    for (const f of files)
      assert.equal(
        await readFile(join(DEPLOY_BASE, 'crds', f), 'utf8'),
        await readFile(join(CRD_DIR, f), 'utf8'),
        `deploy/base/crds/${f}`,
      );
    assert.deepEqual(
      ofKind(rendered.base ?? [], 'CustomResourceDefinition')
        .map((c) => c.metadata?.name)
        .sort(),
      [
        'kindlingconfigs.bootstrap.kindling.dev',
        'kindlingconfigtemplates.bootstrap.kindling.dev',
        'nodepools.kindling.dev',
      ],
    );
  });

  it('when rendered, the ExtensionConfig should have the Cluster API manager call the extension for tenant namespaces only, as the local environment registers it', () => {
    for (const [name, objects] of Object.entries(rendered)) {
      const [config] = ofKind(objects, 'ExtensionConfig') as unknown as ExtensionConfig[];
      assert.deepEqual(
        config?.spec.namespaceSelector,
        { matchLabels: { 'kindling.dev/tenant': 'true' } },
        `${name}: the ExtensionConfig's namespaceSelector`,
      );
      assert.deepEqual(config?.spec.namespaceSelector, extensionConfig({ caPem: '' }).spec.namespaceSelector);
    }
  });

  it('when rendered, every component should have its ServiceAccount, RBAC bound to it and a hardened Deployment running it', () => {
    for (const [name, objects] of Object.entries(rendered))
      for (const component of COMPONENTS) assertComponent(objects, name, component);
  });

  it("when a Deployment's arguments are parsed with its command's flags, they should be known and valid, with leader election on", async () => {
    for (const [name, objects] of Object.entries(rendered))
      for (const d of ofKind(objects, 'Deployment') as k8s.V1Deployment[]) await assertArguments(d, name);
  });

  it('when rendered, kindling-system should deny ingress by default: a policy selects every pod and admits nothing', () => {
    for (const [name, objects] of Object.entries(rendered)) {
      const denyAll = (ofKind(objects, 'NetworkPolicy') as NetworkPolicy[]).filter(
        (p) =>
          p.metadata?.namespace === KINDLING_NAMESPACE &&
          Object.keys(p.spec.podSelector).length === 0 &&
          (p.spec.policyTypes ?? []).includes('Ingress') &&
          (p.spec.ingress ?? []).length === 0,
      );
      assert.equal(denyAll.length, 1, `${name}: one default-deny ingress policy`);
    }
  });

  it("when rendered, every Deployment's pods should be isolated for ingress by the policies", () => {
    for (const [name, objects] of Object.entries(rendered)) {
      const policies = ofKind(objects, 'NetworkPolicy') as NetworkPolicy[];
      for (const d of ofKind(objects, 'Deployment') as k8s.V1Deployment[])
        assert.ok(
          selecting(policies, targetOf(d)).length > 0,
          `${name}/${d.metadata?.name}: no policy selects its pods`,
        );
    }
  });

  it('when anyone connects to a port of a component, only the documented sources should get in: the ignition port from anywhere, the extension from the Cluster API manager, the ops port from a monitoring namespace', () => {
    for (const [name, objects] of Object.entries(rendered))
      for (const component of COMPONENTS) assertReaches(objects, name, component);
  });

  it('when rendered, no Kindling ServiceAccount should be bound cluster-wide, and the tenant Roles should be in exactly the namespaces of kindling-tenants', () => {
    for (const [name, objects] of Object.entries(rendered)) assertTenancy(objects, name);
    assert.deepEqual(tenantsOf(rendered['overlays/local'] ?? []), ['tenants'], 'npm start serves its namespace');
  });

  it('when every rendered object is applied with a server-side dry run, the apiserver should accept each one, and each Pod the restricted Pod Security level', async () => {
    const applier = createApplier(mgmt.kubeConfig, 'kindling-deploy-test');
    // A dry run persists nothing: what the namespaced objects need must exist for real first.
    for (const prerequisite of ofKind(rendered.base ?? [], 'Namespace')) await applier.apply(prerequisite);
    for (const tenant of tenantsOf(rendered['overlays/local'] ?? []))
      await applier.apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: tenant } });
    const core = mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api);
    for (const [name, objects] of Object.entries(rendered)) {
      for (const obj of objects)
        await eventually(
          `${name}: ${obj.kind}/${obj.metadata?.name} accepted`,
          () => applier.apply(obj, { dryRun: true }),
          20_000,
        );
      for (const d of ofKind(objects, 'Deployment') as k8s.V1Deployment[])
        await core.createNamespacedPod({ namespace: KINDLING_NAMESPACE, body: podOf(d), dryRun: 'All' });
    }
  });
});

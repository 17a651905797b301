/**
 * deploy/: the kustomize base and the local overlay render with the test bed's kubectl, every rendered object is
 * accepted by a real kube-apiserver (server-side dry run), every Deployment's Pod passes the namespace's
 * `restricted` Pod Security level, and every container's arguments parse with its command's own flags.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import * as k8s from '#k8s';
import { COMMANDS } from '../../cli/src/commands.js';
import { CRD_DIR } from '../../api/src/crd.js';
import { createApplier } from '../../support/src/apply.js';
import { loadCommand } from '../../support/src/command.js';
import { envName, parseConfig } from '../../support/src/config.js';
import { DEPLOY_BASE, KINDLING_NAMESPACE, LOCAL_OVERLAY, renderKustomization } from '../../local/src/credentials.js';
import { eventually, installCapiCrds, startCluster, type Cluster } from '../bed/src/index.js';

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

  it('when rendered, every component should have its ServiceAccount, RBAC bound to it and a hardened Deployment running it', () => {
    for (const [name, objects] of Object.entries(rendered))
      for (const component of COMPONENTS) assertComponent(objects, name, component);
  });

  it("when a Deployment's arguments are parsed with its command's flags, they should be known and valid, with leader election on", async () => {
    for (const [name, objects] of Object.entries(rendered))
      for (const d of ofKind(objects, 'Deployment') as k8s.V1Deployment[]) await assertArguments(d, name);
  });

  it('when every rendered object is applied with a server-side dry run, the apiserver should accept each one, and each Pod the restricted Pod Security level', async () => {
    const applier = createApplier(mgmt.kubeConfig, 'kindling-deploy-test');
    // A dry run persists nothing: what the namespaced objects need must exist for real first.
    for (const prerequisite of ofKind(rendered.base ?? [], 'Namespace')) await applier.apply(prerequisite);
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

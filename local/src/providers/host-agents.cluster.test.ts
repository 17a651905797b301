/**
 * The local hosts' agents on the real test bed: a management cluster holding the guest's kubeconfig Secret, a
 * guest with KWOK running the agent Pod on its Node, the objects the upgrader applies there (the policy that
 * holds each agent to its own Node among them), and a host root for the Node. A host must run `kindling agent`
 * with a token bound to its agent Pod, as a kubelet would, or the policy refuses every write of its agent.
 */
import { after, before, describe, it } from 'node:test';
import { layAccounts } from '../../../node-agent/testing/agent.js';
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as k8s from '#k8s';
import { startCluster, type Cluster } from '../../../test/bed/src/index.js';
import { ANNOTATIONS, FIELD_MANAGERS, NODE_STATES } from '../../../api/src/keys.js';
import { createApplier } from '../../../support/src/apply.js';
import { createLogger } from '../../../support/src/logger.js';
import { createTestNode, eventually } from '../../../drainer/testing/index.js';
import {
  agentNodePolicy,
  agentPod,
  agentRbac,
  guestNamespace,
  payloadSecret,
} from '../../../inplace-upgrader/src/desired.js';
import { agentPodName, GUEST_NAMESPACE, payloadSecretName } from '../../../api/src/node-agent.js';
import { startHostAgents } from './host-agents.js';

const NS = 'default';
const NODE = 'host-1';
const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);

/** The Pod and node a kubeconfig's ServiceAccount token is bound to, from the token's own claims. */
async function boundTo(kubeconfigFile: string): Promise<{ pod?: string; node?: string }> {
  const kc = new k8s.KubeConfig();
  kc.loadFromString(await readFile(kubeconfigFile, 'utf8'));
  const payload = (kc.getCurrentUser()?.token ?? '').split('.')[1] ?? '';
  const claims = JSON.parse(Buffer.from(payload, 'base64url').toString()) as {
    'kubernetes.io'?: { pod?: { uid?: string }; node?: { name?: string } };
  };
  return { pod: claims['kubernetes.io']?.pod?.uid, node: claims['kubernetes.io']?.node?.name };
}

describe('host agents (local environment)', () => {
  let mgmt: Cluster;
  let guest: Cluster;
  let core: k8s.CoreV1Api;
  let stateDir: string;
  let agents: ReturnType<typeof startHostAgents> | undefined;
  const credentials = (): string => join(stateDir, 'credentials', 'agents', `${NS}.tenant.${NODE}.kubeconfig`);

  /** Hands the node config `hash` (users' SSH keys only: no drain, no reboot) and waits until it settled. */
  async function handOut(hash: string): Promise<Record<string, string>> {
    const config = Buffer.from(
      JSON.stringify({
        ignition: { version: '3.4.0' },
        passwd: { users: [{ name: 'core', sshAuthorizedKeys: [`ssh-ed25519 AAAA ${hash}`] }] },
      }),
    );
    await core
      .deleteNamespacedSecret({ name: payloadSecretName(NODE), namespace: GUEST_NAMESPACE })
      .catch(() => undefined);
    await core.createNamespacedSecret({
      namespace: GUEST_NAMESPACE,
      body: payloadSecret({ node: NODE, pool: 'pool', hash, config }),
    });
    await core.patchNode(
      { name: NODE, body: { metadata: { annotations: { [ANNOTATIONS.desiredConfig]: hash } } } },
      merge,
    );
    return eventually(`${NODE} to settle at ${hash}`, async () => {
      const ann = (await core.readNode({ name: NODE })).metadata?.annotations ?? {};
      return ann[ANNOTATIONS.state] === NODE_STATES.degraded || ann[ANNOTATIONS.currentConfig] === hash
        ? ann
        : undefined;
    });
  }

  before(async () => {
    mgmt = await startCluster({ name: 'mgmt', controllerManager: false });
    guest = await startCluster({
      name: 'tenant',
      kwok: true,
      controllerManager: false,
      management: { cluster: mgmt, namespace: NS },
    });
    core = guest.kubeConfig.makeApiClient(k8s.CoreV1Api);
    const applier = createApplier(guest.kubeConfig, FIELD_MANAGERS.inplaceUpgrader);
    for (const obj of [guestNamespace(), ...agentNodePolicy(), ...agentRbac()]) await applier.apply(obj);
    await createTestNode(guest.kubeConfig, NODE);
    await core.patchNode(
      {
        name: NODE,
        body: {
          metadata: {
            annotations: {
              [ANNOTATIONS.currentConfig]: 'h0',
              [ANNOTATIONS.state]: NODE_STATES.done,
              [ANNOTATIONS.desiredConfig]: 'h0',
            },
          },
        },
      },
      merge,
    );
    stateDir = await mkdtemp(join(tmpdir(), 'kindling-host-agents-'));
    const hostRoot = (namespace: string, node: string): string => join(stateDir, 'hosts', namespace, node);
    // The host knows core, whose SSH keys the configs hand out (the agent creates no users).
    await layAccounts(hostRoot(NS, NODE));
    agents = startHostAgents({
      kubeConfig: mgmt.kubeConfig,
      stateDir,
      log: createLogger({ name: 'host-agents', level: 'error' }),
      hostRoot,
    });
    await agents.start();
  });

  after(async () => {
    await agents?.stop();
    await guest?.stop();
    await mgmt?.stop();
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  });

  it("when an agent Pod lands on a host's Node, it should run the agent with a token bound to that Pod, and the agent should update its own Node", async () => {
    const pod = await core.createNamespacedPod({
      namespace: GUEST_NAMESPACE,
      body: agentPod({ node: NODE, pool: 'pool', image: 'kindling:test' }),
    });
    const ann = await handOut('h1');
    assert.equal(
      ann[ANNOTATIONS.state],
      NODE_STATES.done,
      `the node is ${ann[ANNOTATIONS.state]}: ${ann[ANNOTATIONS.reason]}`,
    );
    assert.equal(ann[ANNOTATIONS.currentConfig], 'h1');
    assert.deepEqual(await boundTo(credentials()), { pod: pod.metadata?.uid, node: NODE });
  });

  it('when the agent Pod is replaced, it should restart the agent with a token bound to the new Pod, which goes on updating the Node', async () => {
    await core.deleteNamespacedPod({ name: agentPodName(NODE), namespace: GUEST_NAMESPACE, gracePeriodSeconds: 0 });
    await eventually(
      'the old agent Pod to go',
      async () => !(await core.listNamespacedPod({ namespace: GUEST_NAMESPACE })).items.length,
    );
    const pod = await core.createNamespacedPod({
      namespace: GUEST_NAMESPACE,
      body: agentPod({ node: NODE, pool: 'pool', image: 'kindling:test' }),
    });
    await eventually(
      'credentials bound to the new Pod',
      async () => (await boundTo(credentials())).pod === pod.metadata?.uid,
    );
    const ann = await handOut('h2');
    assert.equal(
      ann[ANNOTATIONS.state],
      NODE_STATES.done,
      `the node is ${ann[ANNOTATIONS.state]}: ${ann[ANNOTATIONS.reason]}`,
    );
    assert.equal(ann[ANNOTATIONS.currentConfig], 'h2');
  });
});

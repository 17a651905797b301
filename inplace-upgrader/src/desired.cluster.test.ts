/**
 * The upgrader's guest objects. The policy that holds each agent to its own Node is judged by a real guest
 * apiserver (Kubernetes v1.36, KWOK running the agent Pods on their Nodes), with the objects applied as the
 * upgrader applies them and the agent holding a ServiceAccount token bound to its Pod, as the kubelet mounts it.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import * as k8s from '#k8s';
import { startCluster, type Cluster } from '../../test/bed/src/index.js';
import { ANNOTATIONS, FIELD_MANAGERS, NODE_STATES } from '../../api/src/keys.js';
import { createApplier } from '../../support/src/apply.js';
import { asRefusal, type Refusal } from '../../support/src/errors.js';
import { createTestNode, eventually } from '../../drainer/testing/index.js';
import { cordonPatch, drainedPatch } from '../../drainer/src/plan.js';
import { tokenKubeconfig } from '../../local/src/credentials.js';
import {
  AGENT_NODE_ANNOTATIONS,
  AGENT_NODE_POLICY,
  agentNodePolicy,
  agentPod,
  agentRbac,
  agentTokenRequest,
  guestNamespace,
} from './desired.js';
import { AGENT_SERVICE_ACCOUNT, GUEST_NAMESPACE } from '../../api/src/node-agent.js';
import { boundAgentKubeconfig } from '../testing/index.js';
import { agentCommand } from '../../node-agent/src/command.js';

const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);
const NODE_NAME_CLAIM = 'authentication.kubernetes.io/node-name';

describe('agentNodePolicy', () => {
  const [policy, binding] = agentNodePolicy() as [
    k8s.V1ValidatingAdmissionPolicy,
    k8s.V1ValidatingAdmissionPolicyBinding,
  ];

  it('when built, it should judge every update of a Node by the agent ServiceAccount, and nobody else, failing closed', () => {
    assert.deepEqual(policy.spec?.matchConstraints?.resourceRules, [
      { apiGroups: [''], apiVersions: ['*'], operations: ['UPDATE'], resources: ['nodes'] },
    ]);
    assert.deepEqual(
      policy.spec?.matchConditions?.map((c) => c.expression),
      [`request.userInfo.username == 'system:serviceaccount:${GUEST_NAMESPACE}:${AGENT_SERVICE_ACCOUNT}'`],
    );
    assert.equal(policy.spec?.failurePolicy, 'Fail');
    assert.ok(policy.spec?.validations?.every((v) => v.reason === 'Forbidden'));
  });

  it('when built, its binding should deny what the policy refuses, cluster-wide', () => {
    assert.equal(binding.metadata?.name, AGENT_NODE_POLICY);
    assert.deepEqual(binding.spec, { policyName: policy.metadata?.name, validationActions: ['Deny'] });
  });

  it('when built, the annotations it leaves to the agent should be the five the agent writes, none of another component', () => {
    assert.deepEqual(
      [...AGENT_NODE_ANNOTATIONS].sort(),
      [
        ANNOTATIONS.currentConfig,
        ANNOTATIONS.desiredDrain,
        ANNOTATIONS.reason,
        ANNOTATIONS.ceilingHeld,
        ANNOTATIONS.state,
      ].sort(),
    );
    const keys = policy.spec?.variables?.find((v) => v.name === 'agentKeys')?.expression ?? '';
    for (const key of AGENT_NODE_ANNOTATIONS) assert.ok(keys.includes(`'${key}'`), `${key} is not in ${keys}`);
    for (const key of [
      ANNOTATIONS.desiredConfig,
      ANNOTATIONS.lastAppliedDrain,
      ANNOTATIONS.cordonedBeforeDrain,
      ANNOTATIONS.poolTaints,
    ])
      assert.ok(!keys.includes(key), `${key} is in ${keys}`);
  });
});

describe('agentPod', () => {
  it('when built, it should declare no port and its command take no address to serve on: on the host network no NetworkPolicy applies, so the agent accepts nothing by listening on nothing', () => {
    const pod = agentPod({ node: 'a', pool: 'p', image: 'i' });
    assert.equal(pod.spec?.hostNetwork, true);
    assert.deepEqual(
      pod.spec?.containers.flatMap((c) => c.ports ?? []),
      [],
    );
    assert.deepEqual(
      Object.keys(agentCommand.flags).filter((f) => /address|port|listen/i.test(f)),
      [],
    );
  });
});

describe('agentTokenRequest', () => {
  it('when given an agent Pod, it should bind the token to that Pod by name and uid', () => {
    const pod = {
      ...agentPod({ node: 'a', pool: 'p', image: 'i' }),
      metadata: { name: 'kindling-agent-a', uid: 'u-1' },
    };
    assert.deepEqual(agentTokenRequest(pod, 600).spec, {
      audiences: [],
      expirationSeconds: 600,
      boundObjectRef: { apiVersion: 'v1', kind: 'Pod', name: 'kindling-agent-a', uid: 'u-1' },
    });
  });
});

describe('the agent held to its own Node, on a real guest', () => {
  let guest: Cluster;
  let admin: k8s.CoreV1Api;
  /** The agent of node a: a token bound to its Pod on a. */
  let agentA: k8s.CoreV1Api;
  let agentAKubeconfig: string;

  const clientOf = (yaml: string): k8s.CoreV1Api => {
    const kc = new k8s.KubeConfig();
    kc.loadFromString(yaml);
    return kc.makeApiClient(k8s.CoreV1Api);
  };
  /** The apiserver's refusal of a write (403/422/400 with its message), or undefined when it was allowed. */
  const refusalOf = async (write: Promise<unknown>): Promise<Refusal | undefined> => {
    try {
      await write;
      return undefined;
    } catch (err) {
      const refused = asRefusal(err, 'Node', '');
      if (!refused) throw err;
      return refused.refusal;
    }
  };
  /** The write must be refused by the policy (403) with a message matching `message`. */
  const assertRefused = async (write: Promise<unknown>, message: RegExp): Promise<void> => {
    const refusal = await refusalOf(write);
    assert.ok(refusal, 'the write was allowed');
    assert.equal(refusal.code, 403, refusal.message);
    assert.match(refusal.message, message);
  };
  const node = async (name: string): Promise<k8s.V1Node> => admin.readNode({ name });

  before(async () => {
    guest = await startCluster({ name: 'agent-node', kwok: true, controllerManager: false });
    admin = guest.kubeConfig.makeApiClient(k8s.CoreV1Api);
    // What the upgrader applies before its first agent Pod, in its order, under its field manager.
    const applier = createApplier(guest.kubeConfig, FIELD_MANAGERS.inplaceUpgrader);
    for (const obj of [guestNamespace(), ...agentNodePolicy(), ...agentRbac()]) await applier.apply(obj);
    await Promise.all(['a', 'b'].map((n) => createTestNode(guest.kubeConfig, n, { 'example.com/role': 'worker' })));
    const pod = await admin.createNamespacedPod({
      namespace: GUEST_NAMESPACE,
      body: agentPod({ node: 'a', pool: 'pool', image: 'kindling:test' }),
    });
    await eventually(
      'the agent Pod to run on a',
      async () =>
        (await admin.readNamespacedPod({ name: pod.metadata?.name ?? '', namespace: GUEST_NAMESPACE })).status
          ?.phase === 'Running',
    );
    agentAKubeconfig = await boundAgentKubeconfig(guest.kubeConfig, pod);
    agentA = clientOf(agentAKubeconfig);
    // The apiserver enforces a policy a moment after it is created; a dry run asks without writing anything.
    await eventually(
      'the agent of a to be refused a (dry-run) write to node b: the policy never came into force',
      async () =>
        (await refusalOf(
          agentA.patchNode(
            {
              name: 'b',
              dryRun: 'All',
              body: { metadata: { annotations: { [ANNOTATIONS.desiredDrain]: 'drain-x' } } },
            },
            merge,
          ),
        )) !== undefined,
    );
  });

  after(async () => {
    await guest?.stop();
  });

  it('when the guest apiserver issues a token bound to the agent Pod on node a, it should carry the node-name claim a', async () => {
    const kc = new k8s.KubeConfig();
    kc.loadFromString(agentAKubeconfig);
    const review = await kc
      .makeApiClient(k8s.AuthenticationV1Api)
      .createSelfSubjectReview({ body: { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' } });
    assert.equal(
      review.status?.userInfo?.username,
      `system:serviceaccount:${GUEST_NAMESPACE}:${AGENT_SERVICE_ACCOUNT}`,
    );
    assert.deepEqual(review.status?.userInfo?.extra?.[NODE_NAME_CLAIM], ['a']);
  });

  it('when the agent of node a writes and clears the annotations it owns on its own Node, it should be allowed', async () => {
    const want = {
      [ANNOTATIONS.state]: NODE_STATES.degraded,
      [ANNOTATIONS.reason]: 'broken',
      [ANNOTATIONS.currentConfig]: 'h0',
      [ANNOTATIONS.desiredDrain]: 'drain-h1',
    };
    await agentA.patchNode({ name: 'a', body: { metadata: { annotations: want } } }, merge);
    await agentA.patchNode(
      {
        name: 'a',
        body: { metadata: { annotations: { [ANNOTATIONS.state]: NODE_STATES.done, [ANNOTATIONS.reason]: null } } },
      },
      merge,
    );
    const ann = (await node('a')).metadata?.annotations ?? {};
    assert.deepEqual(
      {
        state: ann[ANNOTATIONS.state],
        reason: ann[ANNOTATIONS.reason],
        current: ann[ANNOTATIONS.currentConfig],
        drain: ann[ANNOTATIONS.desiredDrain],
      },
      { state: NODE_STATES.done, reason: undefined, current: 'h0', drain: 'drain-h1' },
    );
  });

  it("when the agent of node a asks a drain of node b, it should be refused with the policy's message and b should be unchanged", async () => {
    const before = await node('b');
    await assertRefused(
      agentA.patchNode(
        { name: 'b', body: { metadata: { annotations: { [ANNOTATIONS.desiredDrain]: 'drain-evil' } } } },
        merge,
      ),
      new RegExp(
        `ValidatingAdmissionPolicy '${AGENT_NODE_POLICY}'.*: the kindling agent of node a may write only its own Node, not b$`,
      ),
    );
    assert.deepEqual((await node('b')).metadata?.annotations, before.metadata?.annotations);
  });

  const ownNodeWrites: Array<{ what: string; body: object }> = [
    { what: 'adds a label', body: { metadata: { labels: { 'example.com/evil': 'true' } } } },
    { what: 'removes a label', body: { metadata: { labels: { 'example.com/role': null } } } },
    { what: 'adds a taint', body: { spec: { taints: [{ key: 'example.com/evil', effect: 'NoSchedule' }] } } },
    { what: 'cordons it', body: { spec: { unschedulable: true } } },
  ];
  for (const { what, body } of ownNodeWrites) {
    it(`when the agent of node a ${what} on its own Node, it should be refused and the Node unchanged`, async () => {
      const before = await node('a');
      await assertRefused(
        agentA.patchNode({ name: 'a', body }, merge),
        /the kindling agent of node a may change only annotations of its Node, not its spec \(taints, unschedulable\), labels/,
      );
      const now = await node('a');
      assert.deepEqual(
        { spec: now.spec, labels: now.metadata?.labels },
        { spec: before.spec, labels: before.metadata?.labels },
      );
    });
  }

  for (const key of [ANNOTATIONS.lastAppliedDrain, ANNOTATIONS.desiredConfig, ANNOTATIONS.cordonedBeforeDrain]) {
    it(`when the agent of node a writes ${key} (not its own annotation) on its own Node, it should be refused naming the key`, async () => {
      await assertRefused(
        agentA.patchNode({ name: 'a', body: { metadata: { annotations: { [key]: 'forged' } } } }, merge),
        new RegExp(
          `the kindling agent of node a may change on its Node only the annotations the agent writes \\(.*\\), not ${key}$`,
        ),
      );
      assert.equal((await node('a')).metadata?.annotations?.[key], undefined);
    });
  }

  it('when the agent ServiceAccount holds a token bound to no Pod, it should be refused a write even to node a', async () => {
    const request = await admin.createNamespacedServiceAccountToken({
      name: AGENT_SERVICE_ACCOUNT,
      namespace: GUEST_NAMESPACE,
      body: { spec: { audiences: [], expirationSeconds: 600 } },
    });
    const unbound = clientOf(tokenKubeconfig(guest.kubeConfig, AGENT_SERVICE_ACCOUNT, request.status?.token ?? ''));
    await assertRefused(
      unbound.patchNode(
        { name: 'a', body: { metadata: { annotations: { [ANNOTATIONS.state]: NODE_STATES.working } } } },
        merge,
      ),
      /this token is bound to no Pod on a node$/,
    );
  });

  it('when the upgrader and the drainer write any Node with their own identity (the guest kubeconfig), they should not be affected', async () => {
    // The upgrader's hand-out, then the drainer's cordon and drained patches, on a node whose agent is elsewhere.
    await admin.patchNode(
      { name: 'b', body: { metadata: { annotations: { [ANNOTATIONS.desiredConfig]: 'h1' } } } },
      merge,
    );
    const cordon = cordonPatch(await node('b'), new Date());
    assert.ok(cordon);
    await admin.patchNode({ name: 'b', body: cordon }, merge);
    await admin.patchNode({ name: 'b', body: drainedPatch('drain-h1') }, merge);
    await admin.patchNode({ name: 'b', body: { metadata: { labels: { 'example.com/pool': 'p' } } } }, merge);
    const b = await node('b');
    assert.equal(b.spec?.unschedulable, true);
    assert.equal(b.metadata?.annotations?.[ANNOTATIONS.desiredConfig], 'h1');
    assert.equal(b.metadata?.annotations?.[ANNOTATIONS.lastAppliedDrain], 'drain-h1');
    assert.equal(b.metadata?.labels?.['example.com/pool'], 'p');
  });
});

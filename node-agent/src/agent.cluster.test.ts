/**
 * The agent on a real apiserver: `kindling agent` as its own process per node, against the node's own host
 * root with a sentinel folder beside it. A config that would write outside the root must end the node
 * Degraded with a reason naming the entry, with nothing written inside or outside the root; a link the host
 * holds with an absolute target is followed inside the root.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { readFile, rm, symlink } from 'node:fs/promises';
import { join } from 'node:path';
import * as k8s from '#k8s';
import { startCluster, type Cluster } from '../../test/bed/src/index.js';
import { ANNOTATIONS, NODE_STATES } from '../../api/src/keys.js';
import { createTestNode, eventually } from '../../drainer/testing/index.js';
import { guestNamespace, payloadSecret } from '../../inplace-upgrader/src/desired.js';
import { KINDLING_BIN } from '../../inplace-upgrader/testing/index.js';
import type { IgnitionConfig } from '../../support/src/ignition/ignition.js';
import { confinedRoot, ESCAPES, tree } from '../testing/agent.js';

const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);

describe('agent confined to the host root', () => {
  let guest: Cluster;
  let core: k8s.CoreV1Api;
  const bases: string[] = [];
  const agents: ChildProcess[] = [];

  before(async () => {
    guest = await startCluster({ name: 'agent', controllerManager: false });
    core = guest.kubeConfig.makeApiClient(k8s.CoreV1Api);
    await core.createNamespace({ body: guestNamespace() });
  });

  after(async () => {
    for (const agent of agents) agent.kill('SIGKILL');
    await guest?.stop();
    await Promise.all(bases.map((b) => rm(b, { recursive: true, force: true })));
  });

  /** A node at h0 handed `config` as h1, with its agent running against a fresh root; the node's state once settled. */
  async function handOut(
    node: string,
    config: Omit<IgnitionConfig, 'ignition'>,
    prepare: (root: string) => Promise<unknown>,
  ): Promise<{
    ann: Record<string, string>;
    root: string;
    outside: string;
    before: { root: string[]; outside: string[] };
  }> {
    const { base, root, outside } = await confinedRoot();
    bases.push(base);
    await prepare(root);
    const before = { root: await tree(root), outside: await tree(outside) };
    await createTestNode(guest.kubeConfig, node);
    const bytes = Buffer.from(JSON.stringify({ ignition: { version: '3.4.0' }, ...config }));
    await core.createNamespacedSecret({
      namespace: guestNamespace().metadata?.name ?? '',
      body: payloadSecret({ node, pool: 'pool', hash: 'h1', config: bytes }),
    });
    await core.patchNode(
      {
        name: node,
        body: {
          metadata: {
            annotations: {
              [ANNOTATIONS.currentConfig]: 'h0',
              [ANNOTATIONS.state]: NODE_STATES.done,
              [ANNOTATIONS.desiredConfig]: 'h1',
            },
          },
        },
      },
      merge,
    );
    const args = [
      KINDLING_BIN,
      'agent',
      '--node',
      node,
      '--root',
      root,
      '--kubeconfig',
      guest.kubeconfigPath,
      '--reboot',
      'simulated',
      '--poll',
      '1s',
      '--log-level',
      'error',
    ];
    const agent = spawn(process.execPath, args, { stdio: ['ignore', 'ignore', 'inherit'] });
    agents.push(agent);
    try {
      const ann = await eventually(`${node} to settle`, async () => {
        const now = (await core.readNode({ name: node })).metadata?.annotations ?? {};
        // A drain asked for means the agent took the config: settled too (no drainer runs here).
        const settled =
          now[ANNOTATIONS.state] === NODE_STATES.degraded ||
          now[ANNOTATIONS.currentConfig] === 'h1' ||
          now[ANNOTATIONS.desiredDrain] !== undefined;
        return settled ? now : undefined;
      });
      return { ann, root, outside, before };
    } finally {
      agent.kill('SIGTERM');
    }
  }

  for (const [i, { condition, prepare, config, reason }] of ESCAPES.entries()) {
    it(`when ${condition}, it should end the node Degraded with a reason naming the entry, and write nothing inside or outside the root`, async () => {
      const { ann, root, outside, before } = await handOut(`escape-${i}`, config, prepare);
      assert.equal(
        ann[ANNOTATIONS.state],
        NODE_STATES.degraded,
        `the node is ${ann[ANNOTATIONS.state]} at ${ann[ANNOTATIONS.currentConfig]}`,
      );
      assert.match(ann[ANNOTATIONS.reason] ?? '', reason);
      assert.equal(ann[ANNOTATIONS.currentConfig], 'h0');
      assert.equal(ann[ANNOTATIONS.desiredDrain], undefined, 'a drain was asked for a refused config');
      assert.deepEqual(await tree(outside), before.outside, 'something was written outside the host root');
      assert.deepEqual(await tree(root), before.root, 'the host root changed although the config was refused');
    });
  }

  it('when home is a link with an absolute target inside the root, it should write the SSH keys inside the root and end Done', async () => {
    // On this machine the target is the sentinel folder; on the host it is a folder of the host's own.
    const outsideOf = (root: string): string => join(root, '..', 'outside');
    const { ann, root, outside, before } = await handOut(
      'abs-home',
      { passwd: { users: [{ name: 'core', sshAuthorizedKeys: ['ssh-ed25519 AAAA core'] }] } },
      (r) => symlink(join(outsideOf(r), 'home'), join(r, 'home')),
    );
    assert.equal(
      ann[ANNOTATIONS.state],
      NODE_STATES.done,
      `the node is ${ann[ANNOTATIONS.state]}: ${ann[ANNOTATIONS.reason]}`,
    );
    assert.equal(ann[ANNOTATIONS.currentConfig], 'h1');
    assert.deepEqual(await tree(outside), before.outside, 'the keys were written outside the host root');
    assert.equal(
      await readFile(join(root, outsideOf(root), 'home', 'core', '.ssh', 'authorized_keys'), 'utf8'),
      'ssh-ed25519 AAAA core\n',
    );
  });
});

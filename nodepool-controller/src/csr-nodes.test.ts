import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Decision, DecisionInput } from './csr-decision.js';
import { decideWithNodes } from './csr-nodes.js';

const input = {
  csr: { spec: { request: '', signerName: 'kubernetes.io/kube-apiserver-client-kubelet', usages: [] } },
  cluster: { namespace: 'tenant-a', name: 'guest' },
  machines: [],
  guestCsrs: () => [],
  now: 0,
  graceMs: 0,
} satisfies Omit<DecisionInput, 'hasNode'>;

/** A decision that, like a bootstrap client CSR's, is denied when the guest already has the Node it names. */
const joinAs =
  (node: string) =>
  (i: DecisionInput): Decision =>
    i.hasNode(node)
      ? { action: 'deny', reason: 'NodeExists', message: `the guest cluster already has a Node "${node}"` }
      : { action: 'ignore', why: 'would join' };

describe('decideWithNodes', () => {
  it('when a request claims the name of a Node the guest has, it should read that Node and deny the request', async () => {
    const reads: string[] = [];
    const decision = await decideWithNodes(
      input,
      (name) => (reads.push(name), Promise.resolve(name === 'host-a1')),
      joinAs('host-a1'),
    );
    assert.equal(decision.action === 'deny' && decision.reason, 'NodeExists');
    assert.deepEqual(reads, ['host-a1']);
  });

  it('when the Node it names does not exist, it should decide with that answer', async () => {
    const decision = await decideWithNodes(input, () => Promise.resolve(false), joinAs('host-a1'));
    assert.equal(decision.action, 'ignore');
  });

  it('when the decision asks about no Node, it should decide once and read none', async () => {
    let decisions = 0;
    const decision = await decideWithNodes(
      input,
      () => assert.fail('no Node should be read'),
      () => (decisions++, { action: 'ignore', why: 'not a kubelet signer' }),
    );
    assert.deepEqual([decision.action, decisions], ['ignore', 1]);
  });

  it('when reading the Node fails, it should fail rather than decide without it', async () => {
    await assert.rejects(
      decideWithNodes(input, () => Promise.reject(new Error('guest apiserver down')), joinAs('host-a1')),
      /guest apiserver down/,
    );
  });

  it('when the second pass asks about a Node the first did not, it should fail instead of guessing', async () => {
    let pass = 0;
    await assert.rejects(
      decideWithNodes(
        input,
        () => Promise.resolve(true),
        (i) => joinAs(++pass === 1 ? 'a' : 'b')(i),
      ),
      /asked about Node "b" only on its second pass/,
    );
  });
});

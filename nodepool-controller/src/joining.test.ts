import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ANNOTATIONS, LABELS } from '../../api/src/keys.js';
import { CAPI_API_VERSION, type Machine } from '../../api/src/capi.js';
import { joinStatus } from './joining.js';
import { computeConditions } from './status.js';
import { samplePool } from '../../api/testing/nodepool.js';

const NOW = Date.UTC(2026, 10, 23, 12);
const MIN = 60_000;

function machine(
  name: string,
  o: { bootedMinAgo?: number; node?: string; failure?: string; deleting?: boolean } = {},
): Machine {
  return {
    apiVersion: CAPI_API_VERSION,
    kind: 'Machine',
    metadata: {
      name,
      namespace: 'tenant-a',
      labels: { [LABELS.nodePool]: 'workers' },
      ...(o.failure ? { annotations: { [ANNOTATIONS.joinFailure]: o.failure } } : {}),
      ...(o.deleting ? { deletionTimestamp: new Date(NOW) } : {}),
    },
    spec: { clusterName: 'guest', bootstrap: {}, infrastructureRef: { apiGroup: 'x', kind: 'LocalMachine', name } },
    status: {
      ...(o.node ? { nodeRef: { name: o.node } } : {}),
      conditions:
        o.bootedMinAgo === undefined
          ? []
          : [
              {
                type: 'InfrastructureReady',
                status: 'True',
                lastTransitionTime: new Date(NOW - o.bootedMinAgo * MIN).toISOString(),
              },
            ],
    },
  };
}

describe('joinStatus', () => {
  const cases: { name: string; machines: Machine[]; late: string[]; waiting: number; nextLateInMs?: number }[] = [
    {
      name: 'when every booted host has a Node, it should report none waiting',
      machines: [machine('a', { bootedMinAgo: 30, node: 'a' })],
      late: [],
      waiting: 0,
    },
    { name: 'when a host has not booted yet, it should not count it', machines: [machine('a')], late: [], waiting: 0 },
    {
      name: 'when a host booted 4 minutes ago without a Node, it should be waiting and late in 6 minutes',
      machines: [machine('a', { bootedMinAgo: 4 })],
      late: [],
      waiting: 1,
      nextLateInMs: 6 * MIN,
    },
    {
      name: 'when hosts booted past the timeout, it should list them oldest first',
      machines: [
        machine('b', { bootedMinAgo: 11 }),
        machine('a', { bootedMinAgo: 20 }),
        machine('c', { bootedMinAgo: 2 }),
      ],
      late: ['a', 'b'],
      waiting: 3,
      nextLateInMs: 8 * MIN,
    },
    {
      name: 'when a Machine is being deleted, it should not count it',
      machines: [machine('a', { bootedMinAgo: 20, deleting: true })],
      late: [],
      waiting: 0,
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const s = joinStatus(c.machines, NOW, 10 * MIN);
      assert.deepEqual(
        s.late.map((l) => l.machine),
        c.late,
      );
      assert.equal(s.waiting, c.waiting);
      assert.equal(s.nextLateInMs, c.nextLateInMs);
    });
  }

  it("when the approver recorded why a host's CSR was denied, it should be the late host's reason; otherwise say none was approved", () => {
    const s = joinStatus(
      [
        machine('a', { bootedMinAgo: 30, failure: 'CSR csr-1 denied: names a Machine of another pool' }),
        machine('b', { bootedMinAgo: 15 }),
      ],
      NOW,
      10 * MIN,
    );
    assert.deepEqual(
      s.late.map((l) => l.reason),
      ['CSR csr-1 denied: names a Machine of another pool', 'no client certificate request was approved for it'],
    );
  });
});

describe('AllNodesJoined', () => {
  const condition = (machines: Machine[]): { status: string; reason: string; message: string } => {
    const joining = { ...joinStatus(machines, NOW, 10 * MIN), timeoutMs: 10 * MIN };
    const c = computeConditions(
      { pool: samplePool(), machines, joining, healthCheckExists: false },
      [],
      new Date(NOW).toISOString(),
    ).find((x) => x.type === 'AllNodesJoined');
    return { status: c?.status ?? '', reason: c?.reason ?? '', message: c?.message ?? '' };
  };

  it('when no booted host is late, it should be True', () => {
    assert.equal(condition([machine('a', { bootedMinAgo: 2 })]).status, 'True');
  });

  it('when hosts booted but did not join within the timeout, it should be False with the count and the first reason', () => {
    const c = condition([
      machine('a', { bootedMinAgo: 30, failure: 'denied: forged node name' }),
      machine('b', { bootedMinAgo: 12 }),
    ]);
    assert.equal(c.status, 'False');
    assert.equal(c.reason, 'NodesNotJoined');
    assert.match(
      c.message,
      /^2 host\(s\) booted but did not join within 10m: a \(and 1 more\), booted at .*: denied: forged node name$/,
    );
  });
});

import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type * as k8s from '#k8s';
import { HOST_PATHS } from '../../api/src/host-paths.js';
import {
  DEFAULT_HEALTH_CHECK_TIMEOUT_MS,
  gateAction,
  gateTimeoutMs,
  payloadKubeletVersion,
  unhealthy,
  type GateAction,
} from './gate.js';
import type { Journal } from './host.js';
import type { Entry } from '../../support/src/ignition/ignition.js';

const MIN = 60_000;

function node(opts: {
  bootId?: string;
  ready?: 'True' | 'False' | 'Unknown';
  reason?: string;
  version?: string;
}): k8s.V1Node {
  const conditions = opts.ready ? [{ type: 'Ready', status: opts.ready, reason: opts.reason }] : [];
  return {
    status: {
      conditions,
      nodeInfo: { bootID: opts.bootId ?? '', kubeletVersion: opts.version ?? '' } as k8s.V1NodeSystemInfo,
    },
  };
}

const applied = (extra: Partial<Journal> = {}): Journal => ({
  hash: 'h1',
  phase: 'applied',
  reboot: true,
  bootId: 'boot-0',
  records: [],
  kubeletVersion: 'v1.36.3',
  ...extra,
});
const healthy = node({ bootId: 'boot-1', ready: 'True', version: 'v1.36.3' });

describe('health gate: one decision', () => {
  const cases: {
    condition: string;
    journal: Journal;
    bootId: string;
    node: k8s.V1Node;
    now?: number;
    want: GateAction['kind'];
    match?: RegExp;
  }[] = [
    {
      condition: 'the host has not rebooted since the apply',
      journal: applied(),
      bootId: 'boot-0',
      node: healthy,
      want: 'reboot',
    },
    {
      condition: 'the host rebooted and the gate has not started',
      journal: applied(),
      bootId: 'boot-1',
      node: healthy,
      want: 'startGate',
    },
    {
      condition: 'the Node reports this boot, Ready, at the payload version',
      journal: applied({ gateStartedAt: 0 }),
      bootId: 'boot-1',
      node: healthy,
      now: MIN,
      want: 'pass',
    },
    {
      condition: 'the gate passed before (a restart between pass and Done)',
      journal: applied({ gateStartedAt: 0, healthy: true }),
      bootId: 'boot-1',
      node: node({}),
      now: 9 * MIN,
      want: 'finish',
    },
    {
      condition: 'the change needed no reboot (SSH keys only)',
      journal: applied({ reboot: false }),
      bootId: 'boot-0',
      node: node({}),
      want: 'finish',
    },
    {
      condition: 'the Node still shows the boot before (a Ready from before the reboot)',
      journal: applied({ gateStartedAt: 0 }),
      bootId: 'boot-1',
      node: node({ bootId: 'boot-0', ready: 'True', version: 'v1.36.3' }),
      now: MIN,
      want: 'wait',
      match: /not reported since the reboot/,
    },
    {
      condition: 'the Node is not Ready within the timeout',
      journal: applied({ gateStartedAt: 0 }),
      bootId: 'boot-1',
      node: node({ bootId: 'boot-1', ready: 'False', reason: 'KubeletConfigInvalid' }),
      now: 4 * MIN,
      want: 'wait',
      match: /not Ready \(Ready=False, KubeletConfigInvalid\)/,
    },
    {
      condition: 'the Node is not Ready when the timeout passes',
      journal: applied({ gateStartedAt: 0 }),
      bootId: 'boot-1',
      node: node({ bootId: 'boot-1', ready: 'False', reason: 'KubeletConfigInvalid' }),
      now: 5 * MIN,
      want: 'rollBack',
      match:
        /^health check failed: 5m after the reboot into h1, the Node is not Ready \(Ready=False, KubeletConfigInvalid\); restored the previous files and units and rebooted$/,
    },
    {
      condition: 'the kubelet reports another version when the timeout passes',
      journal: applied({ gateStartedAt: 0 }),
      bootId: 'boot-1',
      node: node({ bootId: 'boot-1', ready: 'True', version: 'v1.36.2' }),
      now: 6 * MIN,
      want: 'rollBack',
      match: /the kubelet reports v1\.36\.2, not the payload's v1\.36\.3/,
    },
    {
      condition: 'the payload names no kubelet version',
      journal: applied({ gateStartedAt: 0, kubeletVersion: undefined }),
      bootId: 'boot-1',
      node: node({ bootId: 'boot-1', ready: 'True', version: 'kwok' }),
      now: MIN,
      want: 'pass',
    },
    {
      condition: 'the rollback was written and the host has not rebooted since',
      journal: applied({ phase: 'rolledBack', bootId: 'boot-1', reason: 'r' }),
      bootId: 'boot-1',
      node: healthy,
      want: 'reboot',
    },
    {
      condition: 'the host rebooted after the rollback',
      journal: applied({ phase: 'rolledBack', bootId: 'boot-1', reason: 'health check failed: x' }),
      bootId: 'boot-2',
      node: healthy,
      want: 'degrade',
      match: /^health check failed: x$/,
    },
  ];
  for (const c of cases) {
    it(`when ${c.condition}, it should ${c.want}`, () => {
      const action = gateAction({
        journal: c.journal,
        bootId: c.bootId,
        node: c.node,
        now: c.now ?? 0,
        timeoutMs: 5 * MIN,
      });
      assert.equal(action.kind, c.want);
      if (c.match) assert.match('why' in action ? action.why : 'reason' in action ? action.reason : '', c.match);
    });
  }
});

/**
 * The agent's side of the state machine, with the journal it persists and a fake clock: each step asks the
 * gate and does what the agent does (agent.ts #afterApply), so a sequence of steps walks the protocol.
 */
class FakeHost {
  journal: Journal;
  bootId = 'boot-0';
  restored = 0;
  unitRuns = 0;
  degraded: string | undefined;
  finished = false;
  now = 0;

  constructor(journal: Journal) {
    this.journal = journal;
  }

  step(n: k8s.V1Node, timeoutMs = 5 * MIN): GateAction['kind'] {
    const action = gateAction({ journal: this.journal, bootId: this.bootId, node: n, now: this.now, timeoutMs });
    switch (action.kind) {
      case 'reboot':
        this.bootId = `boot-${Number(this.bootId.slice(5)) + 1}`;
        break;
      case 'startGate':
        this.journal = { ...this.journal, gateStartedAt: this.now };
        break;
      case 'pass':
        this.journal = { ...this.journal, healthy: true };
        break;
      case 'finish':
        this.finished = true;
        break;
      case 'runUnits':
        this.unitRuns++;
        this.journal = { ...this.journal, unitsRun: true };
        break;
      case 'rollBack':
        this.restored++;
        this.journal = {
          ...this.journal,
          phase: 'rolledBack',
          reason: action.reason,
          bootId: this.bootId,
          unitsRun: false,
        };
        break;
      case 'degrade':
        this.degraded = action.reason;
        break;
      default:
        break;
    }
    return action.kind;
  }
}

describe('health gate: the sequence of steps (fake clock)', () => {
  it('when the node comes back healthy within the timeout, it should reboot, start the gate, pass and finish without restoring anything', () => {
    const host = new FakeHost(applied());
    assert.equal(host.step(healthy), 'reboot');
    host.now = 10_000;
    assert.equal(host.step(node({ bootId: 'boot-0', ready: 'True', version: 'v1.36.2' })), 'startGate');
    host.now = 20_000;
    assert.equal(host.step(node({ bootId: 'boot-0', ready: 'True', version: 'v1.36.2' })), 'wait');
    host.now = 4 * MIN;
    assert.equal(host.step(healthy), 'pass');
    // A restart of the agent here, and the Node NotReady for a moment: the passed gate holds.
    assert.equal(host.step(node({ bootId: 'boot-1', ready: 'Unknown' })), 'finish');
    assert.equal(host.restored, 0);
    assert.equal(host.finished, true);
  });

  it('when the node stays not Ready past the timeout, it should restore once, reboot, and end Degraded with the reason, and never retry the update', () => {
    const host = new FakeHost(applied());
    const broken = (): k8s.V1Node => node({ bootId: host.bootId, ready: 'False', reason: 'KubeletConfigInvalid' });
    assert.equal(host.step(broken()), 'reboot');
    host.now = 1_000;
    assert.equal(host.step(broken()), 'startGate');
    for (const t of [MIN, 2 * MIN, 5 * MIN - 1]) {
      host.now = 1_000 + t;
      assert.equal(host.step(broken()), 'wait', `at ${t} ms`);
    }
    host.now = 1_000 + 5 * MIN;
    assert.equal(host.step(broken()), 'rollBack');
    assert.equal(host.step(broken()), 'reboot');
    assert.equal(host.step(node({ bootId: host.bootId, ready: 'True', version: 'v1.36.2' })), 'degrade');
    assert.match(host.degraded ?? '', /^health check failed: 5m after the reboot into h1, the Node is not Ready/);
    // Later steps (an agent restart, more time): still Degraded, nothing restored or rebooted again.
    host.now = 60 * MIN;
    assert.equal(host.step(healthy), 'degrade');
    assert.equal(host.restored, 1);
    assert.equal(host.finished, false);
  });

  it('when the pool gives a shorter timeout, it should roll back at that timeout', () => {
    const host = new FakeHost(applied({ gateStartedAt: 0 }));
    host.bootId = 'boot-1';
    host.now = 30_000;
    assert.equal(host.step(node({ bootId: 'boot-1', ready: 'False' }), gateTimeoutMs('30s')), 'rollBack');
    assert.match(host.journal.reason ?? '', /^health check failed: 30s after the reboot/);
  });
});

describe('health gate after a restart without a reboot', () => {
  const restart = (extra: Partial<Journal> = {}): Journal =>
    applied({ reboot: false, units: { daemonReload: false, reload: [], restart: ['kubelet.service'] }, ...extra });
  const sameBoot = (ready: 'True' | 'False', version = 'v1.36.3'): k8s.V1Node =>
    node({ bootId: 'boot-0', ready, version });

  it('when the kubelet is restarted and comes back Ready at the payload version, it should run the units once, gate, pass and finish without a reboot', () => {
    const host = new FakeHost(restart());
    assert.equal(host.step(sameBoot('True')), 'runUnits');
    assert.equal(host.step(sameBoot('True')), 'startGate');
    assert.equal(host.step(sameBoot('True')), 'pass');
    assert.equal(host.step(sameBoot('True')), 'finish');
    assert.deepEqual([host.bootId, host.unitRuns, host.restored], ['boot-0', 1, 0]);
  });

  it('when the restarted kubelet stays not Ready past the timeout, it should restore, restart it again and end Degraded without a reboot', () => {
    const host = new FakeHost(restart());
    assert.equal(host.step(sameBoot('False')), 'runUnits');
    assert.equal(host.step(sameBoot('False')), 'startGate');
    host.now = 5 * MIN;
    assert.equal(host.step(sameBoot('False')), 'rollBack');
    assert.equal(host.step(sameBoot('True', 'v1.36.2')), 'runUnits');
    assert.equal(host.step(sameBoot('True', 'v1.36.2')), 'degrade');
    assert.match(
      host.degraded ?? '',
      /^health check failed: 5m after restarting kubelet.service for h1, .*restarted kubelet.service again$/,
    );
    assert.deepEqual([host.bootId, host.unitRuns, host.restored], ['boot-0', 2, 1]);
  });

  it('when only a reload runs, it should finish right after it with no gate', () => {
    const host = new FakeHost(
      applied({ reboot: false, units: { daemonReload: false, reload: ['crio.service'], restart: [] } }),
    );
    assert.equal(host.step(sameBoot('False')), 'runUnits');
    assert.equal(host.step(sameBoot('False')), 'finish');
  });
});

describe('health gate inputs', () => {
  it('when the Node annotation is a duration, it should be the timeout; missing or unreadable, the default', () => {
    assert.equal(gateTimeoutMs('90s'), 90_000);
    assert.equal(gateTimeoutMs('1h30m'), 5_400_000);
    assert.equal(gateTimeoutMs(undefined), DEFAULT_HEALTH_CHECK_TIMEOUT_MS);
    assert.equal(gateTimeoutMs('soon'), DEFAULT_HEALTH_CHECK_TIMEOUT_MS);
    assert.equal(DEFAULT_HEALTH_CHECK_TIMEOUT_MS, 5 * MIN);
  });

  it("when the payload writes a release file, it should expect that file's kubelet version; otherwise none", () => {
    const file = (path: string, text: string): Entry => ({
      kind: 'file',
      path,
      mode: 0o644,
      data: Buffer.from(text),
      overwrite: true,
      origin: 'storage',
    });
    assert.equal(
      payloadKubeletVersion([
        file('/etc/x', '{}'),
        file(HOST_PATHS.releaseInfo, '{"version":"1.36.3","kubeletVersion":"v1.36.3"}'),
      ]),
      'v1.36.3',
    );
    assert.equal(payloadKubeletVersion([file(HOST_PATHS.releaseInfo, 'not json')]), undefined);
    assert.equal(payloadKubeletVersion([]), undefined);
  });

  it('when the Node has no Ready condition, it should say so', () => {
    assert.match(unhealthy(node({ bootId: 'b' }), 'b', undefined) ?? '', /no Ready condition/);
    assert.equal(unhealthy(node({ bootId: 'b', ready: 'True' }), 'b', undefined), undefined);
  });
});

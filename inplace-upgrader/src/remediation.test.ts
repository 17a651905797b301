import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ANNOTATIONS, SKIP_REMEDIATION_INPLACE } from '../../api/src/keys.js';
import { skipRemediationChange } from './remediation.js';

const machine = (value?: string): { metadata: { name: string; annotations?: Record<string, string> } } => ({
  metadata: { name: 'm', annotations: value === undefined ? {} : { [ANNOTATIONS.capiSkipRemediation]: value } },
});

describe('skip-remediation while a node is updated in place', () => {
  const cases: { condition: string; now?: string; want: boolean; change: string | null | undefined }[] = [
    { condition: 'the node is handed a target and the Machine has none', want: true, change: SKIP_REMEDIATION_INPLACE },
    {
      condition: "the Machine already carries Kindling's",
      now: SKIP_REMEDIATION_INPLACE,
      want: true,
      change: undefined,
    },
    { condition: 'someone else already spared the Machine', now: '', want: true, change: undefined },
    {
      condition: "the node is done and the Machine carries Kindling's",
      now: SKIP_REMEDIATION_INPLACE,
      want: false,
      change: null,
    },
    {
      condition: 'the node is done and someone else spared the Machine',
      now: 'operator',
      want: false,
      change: undefined,
    },
    { condition: 'the node is done and the Machine carries none', want: false, change: undefined },
  ];
  for (const c of cases) {
    it(`when ${c.condition}, it should ${c.change === undefined ? 'change nothing' : c.change === null ? 'remove it' : 'set it'}`, () => {
      assert.equal(skipRemediationChange(machine(c.now), c.want), c.change);
    });
  }
});

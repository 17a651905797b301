import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Condition } from '../../api/src/conditions.js';
import { configHash } from '../../api/src/config-hash.js';
import { NODEPOOL_API_VERSION, NODEPOOL_KIND } from '../../api/src/nodepool.js';
import {
  decideTokenSecret,
  nodePoolOwner,
  type PoolFacts,
  type TokenSecretFacts,
  type TokenSecretRefusal,
} from './token-secret-decision.js';

const RELEASE = 'registry.example/release:1.36.2';
const CONFIG = '[]';
const HASH = configHash({ release: RELEASE, config: CONFIG });
const BROKEN = 'registry.example/release:1.36.3-broken-kubelet';
const BROKEN_HASH = configHash({ release: BROKEN, config: CONFIG });

const pool = (over: Partial<PoolFacts> = {}): PoolFacts => ({
  metadata: { name: 'inplace', namespace: 'tenants', uid: 'uid-1', generation: 2 },
  spec: { clusterName: 'guest', release: { image: RELEASE } } as PoolFacts['spec'],
  status: { configHash: HASH, observedGeneration: 2, conditions: [] },
  ...over,
});

const secret = (over: Partial<TokenSecretFacts> = {}): TokenSecretFacts => {
  const hash = over.hash ?? HASH;
  return {
    namespace: 'tenants',
    name: `token-inplace-${hash}`,
    pool: 'tenants/inplace',
    hash,
    release: RELEASE,
    inputsHash: hash,
    owner: { name: 'inplace', uid: 'uid-1' },
    ...over,
  };
};

const skewRefused: Condition = {
  type: 'SupportedVersionSkew',
  status: 'False',
  reason: 'PrereleaseNotAllowed',
  message: 'pre-releases are not allowed',
  lastTransitionTime: '2025-01-01T00:00:00Z',
};

describe('token Secret decision', () => {
  const refusals: [string, TokenSecretFacts, PoolFacts | undefined, TokenSecretRefusal, RegExp][] = [
    ['a Secret without owner reference', secret({ owner: undefined }), pool(), 'NoNodePoolOwner', /no owner reference/],
    [
      'a Secret naming another pool than its owner',
      secret({ pool: 'tenants/replace' }),
      pool(),
      'PoolMismatch',
      /owned by NodePool inplace but names pool tenants\/replace/,
    ],
    ['an owner that does not exist', secret(), undefined, 'NodePoolNotFound', /NodePool inplace does not exist/],
    [
      'a stale UID (or an owner of another namespace)',
      secret({ owner: { name: 'inplace', uid: 'uid-of-elsewhere' } }),
      pool(),
      'NodePoolUidMismatch',
      /UID uid-of-elsewhere.*has UID uid-1/,
    ],
    [
      'a name the controller does not write',
      secret({ name: 'my-token' }),
      pool(),
      'UnexpectedName',
      /named token-inplace-.*, not my-token/,
    ],
    [
      'a release edited away from its hash',
      secret({ release: BROKEN, inputsHash: BROKEN_HASH }),
      pool(),
      'InputsMismatch',
      /hash to .*, not to its config hash/,
    ],
    [
      'a release the pool does not use (hand-written with a matching hash)',
      secret({ hash: BROKEN_HASH, release: BROKEN }),
      pool(),
      'ReleaseNotOfPool',
      /uses release registry.example\/release:1.36.2 .* names release .*broken-kubelet/,
    ],
    [
      'a release the pool no longer uses, with the expiry the controller writes when it retires a Secret',
      secret({ hash: BROKEN_HASH, release: BROKEN, expiresAtMs: Date.UTC(2026, 10, 23) }),
      pool(),
      'Retired',
      /moved to release registry.example\/release:1.36.2 .* was retired and is deleted at its expiry/,
    ],
    [
      "the pool's own release while its status refuses it",
      secret({ hash: BROKEN_HASH, release: BROKEN }),
      pool({
        spec: { clusterName: 'guest', release: { image: BROKEN } } as PoolFacts['spec'],
        status: { configHash: HASH, observedGeneration: 2, conditions: [skewRefused] },
      }),
      'TargetRefused',
      /SupportedVersionSkew is False \(PrereleaseNotAllowed/,
    ],
  ];
  for (const [what, s, p, reason, message] of refusals) {
    it(`when ${what}, it should refuse it with ${reason}`, () => {
      const d = decideTokenSecret(s, p);
      assert.equal(d.accepted, false);
      assert.equal(d.accepted ? undefined : d.reason, reason);
      assert.match(d.accepted ? '' : d.message, message);
    });
  }

  const acceptances: [string, TokenSecretFacts, PoolFacts][] = [
    ["the hash the pool's status reports", secret(), pool()],
    [
      "the previous hash of a rollout the pool's status reports",
      secret({ hash: BROKEN_HASH, release: BROKEN }),
      pool({
        status: {
          configHash: HASH,
          observedGeneration: 2,
          rollout: { from: BROKEN_HASH, to: HASH, since: '2025-01-01T00:00:00Z', changes: [] },
        },
      }),
    ],
    [
      "the target of the pool's release before the status names it",
      secret({ hash: BROKEN_HASH, release: BROKEN }),
      pool({ spec: { clusterName: 'guest', release: { image: BROKEN } } as PoolFacts['spec'] }),
    ],
    ['the target of a new pool without status', secret(), pool({ status: undefined })],
    [
      'the target of a changed spec while the status speaks for an older generation',
      secret({ hash: BROKEN_HASH, release: BROKEN }),
      pool({
        metadata: { name: 'inplace', namespace: 'tenants', uid: 'uid-1', generation: 3 },
        spec: { clusterName: 'guest', release: { image: BROKEN } } as PoolFacts['spec'],
        status: { configHash: HASH, observedGeneration: 2, conditions: [skewRefused] },
      }),
    ],
  ];
  for (const [what, s, p] of acceptances) {
    it(`when a Secret holds ${what}, it should accept it for its pool and the pool's cluster`, () => {
      assert.deepEqual(decideTokenSecret(s, p), { accepted: true, pool: 'tenants/inplace', cluster: 'guest' });
    });
  }

  it('when owner references are read, it should take only a NodePool of the contract with a UID', () => {
    const ref = { apiVersion: NODEPOOL_API_VERSION, kind: NODEPOOL_KIND, name: 'inplace', uid: 'u' };
    assert.deepEqual(nodePoolOwner([{ ...ref, kind: 'MachineSet' }, ref]), { name: 'inplace', uid: 'u' });
    assert.equal(nodePoolOwner([{ ...ref, apiVersion: 'example.com/v1' }]), undefined);
    assert.equal(nodePoolOwner([{ ...ref, uid: '' }]), undefined);
    assert.equal(nodePoolOwner(undefined), undefined);
  });
});

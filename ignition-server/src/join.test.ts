import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { parse } from 'yaml';
import { findKubeconfigRefusal, GuestKubeconfigRefusedError } from '../../support/src/guest-kubeconfig-parse.js';
import { isNotFound } from '../../support/src/errors.js';
import {
  bootstrapKubeconfig,
  bootstrapTokenId,
  createGuestJoin,
  desiredBootstrapSecret,
  findGuestKubeconfigError,
  GuestKubeconfigError,
  joinFileBytes,
  newBootstrapToken,
} from './join.js';

const MATERIAL = {
  server: 'https://guest.example:6443',
  caPem: '-----BEGIN CERTIFICATE-----\nguest\n-----END CERTIFICATE-----\n',
  bootstrapToken: 'abcdef.0123456789abcdef',
};

describe('join material', () => {
  it('when a bootstrap token is minted, it should have the format the bootstrap authenticator takes, and differ each time', () => {
    const tokens = new Set(Array.from({ length: 50 }, () => newBootstrapToken()));
    assert.equal(tokens.size, 50);
    for (const t of tokens) assert.match(t, /^[a-z0-9]{6}\.[a-z0-9]{16}$/);
  });

  it("when the guest Secret is built, it should authenticate only (no signing key), carry the pool's groups and expire with the paired token", () => {
    const secret = desiredBootstrapSecret({
      token: MATERIAL.bootstrapToken,
      namespace: 'tenants',
      pool: 'workers',
      expiresAtMs: Date.UTC(2026, 10, 23, 20),
    });
    assert.equal(secret.type, 'bootstrap.kubernetes.io/token');
    assert.equal(secret.metadata?.name, `bootstrap-token-${bootstrapTokenId(MATERIAL.bootstrapToken)}`);
    assert.equal(secret.metadata?.namespace, 'kube-system');
    assert.deepEqual(secret.stringData, {
      'token-id': 'abcdef',
      'token-secret': '0123456789abcdef',
      expiration: '2026-11-23T20:00:00Z',
      'usage-bootstrap-authentication': 'true',
      'auth-extra-groups': 'system:bootstrappers:kindling,system:bootstrappers:kindling:tenants:workers',
      description: 'Kindling bootstrap token of NodePool tenants/workers',
    });
  });

  it('when the bootstrap kubeconfig is rendered, it should hold the guest endpoint, its CA and the token, and no client certificate, as JSON a YAML reader reads the same', () => {
    const text = bootstrapKubeconfig(MATERIAL);
    assert.deepEqual(JSON.parse(text), parse(text));
    const kc = parse(text) as {
      clusters: { cluster: Record<string, string> }[];
      users: { user: Record<string, string> }[];
    };
    assert.equal(kc.clusters[0]?.cluster.server, MATERIAL.server);
    assert.equal(
      Buffer.from(kc.clusters[0]?.cluster['certificate-authority-data'] ?? '', 'base64').toString(),
      MATERIAL.caPem,
    );
    assert.deepEqual(kc.users[0]?.user, { token: MATERIAL.bootstrapToken });
  });

  it('when the join files are rendered, it should be comma-led file entries that close a files list', () => {
    const files = JSON.parse(`[{"path":"/etc/x"}${joinFileBytes(MATERIAL).toString()}]`) as {
      path: string;
      mode: number;
    }[];
    assert.deepEqual(
      files.map((f) => [f.path, f.mode]),
      [
        ['/etc/x', undefined],
        ['/etc/kubernetes/pki/ca.crt', 0o644],
        ['/etc/kubernetes/bootstrap-kubeconfig', 0o600],
      ],
    );
  });

  it("when the guest's kubeconfig cannot be had, it should fail with a GuestKubeconfigError whose cause keeps the refusal or the 404, and forget the config", async () => {
    for (const cause of [
      new GuestKubeconfigRefusedError('users[0].user.exec', 'would run a command'),
      Object.assign(new Error('secrets "guest-kubeconfig" not found'), { code: 404 }),
    ]) {
      let forgotten = 0;
      const join = createGuestJoin({ get: () => Promise.reject(cause), forget: () => void forgotten++ });
      const calls = [
        join.revoke({ namespace: 'ns', cluster: 'guest', tokens: [MATERIAL.bootstrapToken] }),
        join.mint({ namespace: 'ns', cluster: 'guest', pool: 'workers', expiresAtMs: Date.UTC(2026, 10, 23, 20) }),
      ];
      for (const call of calls)
        await assert.rejects(call, (err: unknown) => {
          assert.ok(err instanceof GuestKubeconfigError, String(err));
          assert.match(err.message, /in guest cluster ns\/guest/);
          assert.equal(findGuestKubeconfigError(err), err);
          if (cause instanceof GuestKubeconfigRefusedError) assert.equal(findKubeconfigRefusal(err), cause);
          else assert.ok(isNotFound(err));
          return true;
        });
      assert.equal(forgotten, 2);
    }
  });
});

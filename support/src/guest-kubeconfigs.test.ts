/**
 * A tenant plays the attacker with its `<cluster>-kubeconfig` Secret: an `exec` plugin that would leave a
 * marker file behind, and a `token-file` that would send a file of the reading machine to the tenant's server.
 * Each kubeconfig goes through the real loading paths (the Secret to a client config, the per-cluster cache
 * the components use) and, when one hands out a client, through a real request to a listener that records
 * every Authorization header it gets.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import * as k8s from '#k8s';
import { SECRET_KEYS } from '../../api/src/keys.js';
import { createGuestKubeConfigs, kubeConfigOfSecret } from './guest-kubeconfigs.js';
import { GuestKubeconfigRefusedError } from './guest-kubeconfig-parse.js';
import { makeApiClient } from './kubeconfig.js';
import { createCertificateAuthority } from '../../test/bed/src/pki.js';

describe('guest kubeconfig Secrets written by an attacker', () => {
  let dir: string;
  let server: Server;
  let caData: string;
  let url: string;
  const authorizations: string[] = [];

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'guest-kubeconfigs-'));
    const ca = await createCertificateAuthority('attacker CA');
    const serving = await ca.issue({ commonName: 'attacker', ipAddresses: ['127.0.0.1'], usage: 'server' });
    caData = Buffer.from(ca.certPem).toString('base64');
    server = createServer({ cert: serving.certPem, key: serving.keyPem }, (req, res) => {
      if (req.headers.authorization !== undefined) authorizations.push(req.headers.authorization);
      res.setHeader('Content-Type', 'application/json');
      res.end(JSON.stringify({ major: '1', minor: '36', gitVersion: 'v1.36.3' }));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(async () => {
    server.closeAllConnections();
    server.close();
    await rm(dir, { recursive: true, force: true });
  });

  const secretOf = (user: object): k8s.V1Secret => ({
    metadata: { name: 'evil-kubeconfig', namespace: 'tenant' },
    data: {
      [SECRET_KEYS.kubeconfig]: Buffer.from(
        stringify({
          apiVersion: 'v1',
          kind: 'Config',
          clusters: [{ name: 'evil', cluster: { server: url, 'certificate-authority-data': caData } }],
          users: [{ name: 'evil', user }],
          contexts: [{ name: 'evil', context: { cluster: 'evil', user: 'evil' } }],
          'current-context': 'evil',
        }),
      ).toString('base64'),
    },
  });

  /** Loads the Secret one way and, if that hands out a client config, sends a request with it. */
  const attempt = async (load: () => Promise<k8s.KubeConfig> | k8s.KubeConfig): Promise<unknown> => {
    try {
      const kc = await load();
      await makeApiClient(kc, k8s.VersionApi, 5_000).getCode();
    } catch (err) {
      return err;
    }
    return undefined;
  };

  const paths: [string, (s: k8s.V1Secret) => Promise<k8s.KubeConfig> | k8s.KubeConfig][] = [
    ['kubeConfigOfSecret', (s) => kubeConfigOfSecret(s)],
    ['the guest kubeconfig cache', (s) => createGuestKubeConfigs(() => Promise.resolve(s)).get('tenant', 'evil')],
  ];
  for (const [path, load] of paths) {
    it(`when the Secret's user has an exec plugin, ${path} should refuse it and no process should run`, async () => {
      const marker = join(dir, `exec-ran-${path.replaceAll(' ', '-')}`);
      const credential = { apiVersion: 'client.authentication.k8s.io/v1', kind: 'ExecCredential', status: {} };
      const secret = secretOf({
        exec: {
          apiVersion: 'client.authentication.k8s.io/v1',
          command: '/bin/sh',
          args: ['-c', `touch '${marker}'; echo '${JSON.stringify(credential)}'`],
          interactiveMode: 'Never',
        },
      });
      const err = await attempt(() => load(secret));
      assert.equal(existsSync(marker), false, 'the exec plugin ran');
      assert.ok(err instanceof GuestKubeconfigRefusedError, String(err));
      assert.equal(err.field, 'users[0].user.exec');
    });

    it(`when the Secret's user has a token-file, ${path} should refuse it and the file should never reach the server`, async () => {
      const file = join(dir, 'serviceaccount-token');
      await writeFile(file, 'the-components-serviceaccount-token');
      authorizations.length = 0;
      const err = await attempt(() => load(secretOf({ 'token-file': file })));
      assert.deepEqual(authorizations, [], 'the server got an Authorization header');
      assert.ok(err instanceof GuestKubeconfigRefusedError, String(err));
      assert.equal(err.field, 'users[0].user.token-file');
    });
  }

  it('when the Secret holds only inline data, the request should carry its token and nothing else', async () => {
    authorizations.length = 0;
    assert.equal(await attempt(() => kubeConfigOfSecret(secretOf({ token: 'inline-token' }))), undefined);
    assert.deepEqual(authorizations, ['Bearer inline-token']);
  });
});

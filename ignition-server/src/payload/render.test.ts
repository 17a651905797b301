import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { InvalidConfigError, KUBELET_CONFIG_PATH, RELEASE_INFO_PATH, renderPayload, serialize } from './render.js';
import { minimumVersion, negotiateVersion, SPEC_VERSIONS, type SpecVersion } from './versions.js';
import { createValidator } from './validate.js';
import { BASE_FRAGMENTS, RELEASE_MANIFEST } from '../../testing/index.js';
import type { Release } from '../release/types.js';
import { dataUrlBytes } from '../../../support/src/data-url.js';

const validate = createValidator();
const release: Release = {
  digest: `sha256:${'1'.repeat(64)}`,
  manifest: RELEASE_MANIFEST,
  fragments: Object.entries(BASE_FRAGMENTS).map(([name, config]) => ({ name, config })),
};

const mc = (name: string, spec: Record<string, unknown>): Record<string, unknown> => ({
  apiVersion: 'machineconfiguration.openshift.io/v1',
  kind: 'MachineConfig',
  metadata: { name },
  spec,
});
const kc = (name: string, kubeletConfig: Record<string, unknown>): Record<string, unknown> => ({
  apiVersion: 'machineconfiguration.openshift.io/v1',
  kind: 'KubeletConfig',
  metadata: { name },
  spec: { kubeletConfig },
});
const fileOf = (path: string, text: string): Record<string, unknown> => ({
  path,
  mode: 420,
  overwrite: true,
  contents: { source: `data:,${encodeURIComponent(text)}` },
});

type Files = { path: string; contents: { source: string } }[];
function files(config: Record<string, unknown>): Files {
  return (config.storage as { files?: Files } | undefined)?.files ?? [];
}
function text(config: Record<string, unknown>, path: string): string | undefined {
  return dataUrlBytes(files(config).find((f) => f.path === path)?.contents.source ?? '')?.toString();
}

describe('payload rendering', () => {
  it('when the pool has no documents, it should serve the release fragments, the release identity and the bootstrap kubelet configuration, valid at every version', async () => {
    const payload = renderPayload(release, []);
    assert.equal(payload.minVersion, '3.0.0');
    assert.deepEqual(
      files(payload.config)
        .map((f) => f.path)
        .sort(),
      ['/etc/kindling/release', RELEASE_INFO_PATH, KUBELET_CONFIG_PATH],
    );
    const kubelet = JSON.parse(text(payload.config, KUBELET_CONFIG_PATH) ?? '') as Record<string, unknown>;
    assert.deepEqual(kubelet.authentication, {
      anonymous: { enabled: false },
      webhook: { enabled: true },
      x509: { clientCAFile: '/etc/kubernetes/pki/ca.crt' },
    });
    assert.equal(kubelet.serverTLSBootstrap, true);
    assert.deepEqual(JSON.parse(text(payload.config, RELEASE_INFO_PATH) ?? ''), {
      ...RELEASE_MANIFEST,
      digest: release.digest,
    });
    for (const v of ['3.0.0', '3.1.0', '3.2.0', '3.3.0'] as SpecVersion[]) {
      assert.equal(await validate(serialize(payload, v)), undefined, v);
      assert.equal(
        (JSON.parse(serialize(payload, v).toString()) as { ignition: { version: string } }).ignition.version,
        v,
      );
    }
  });

  it('when MachineConfigs touch the same file and unit, it should let the later name win and interleave release fragments by name', async () => {
    const docs = [
      mc('99-b', { config: { ignition: { version: '3.2.0' }, storage: { files: [fileOf('/etc/motd', 'b')] } } }),
      mc('05-a', {
        config: {
          ignition: { version: '3.2.0' },
          storage: { files: [fileOf('/etc/motd', 'a'), fileOf('/etc/kindling/release', 'overridden')] },
          systemd: { units: [{ name: 'kubelet.service', enabled: false }] },
        },
      }),
      mc('00-base', {
        config: { ignition: { version: '3.1.0' }, storage: { files: [fileOf('/etc/kindling/release', 'tie')] } },
      }),
    ];
    const payload = renderPayload(release, docs);
    assert.equal(text(payload.config, '/etc/motd'), 'b');
    // 00-base (release) < 00-base (pool, overrides on tie) < 05-a < 10-kubelet (release) < 99-b
    assert.equal(text(payload.config, '/etc/kindling/release'), 'overridden');
    const unit = (payload.config.systemd as { units: { name: string; enabled: boolean; contents?: string }[] }).units;
    assert.equal(unit.length, 1);
    assert.equal(unit[0]?.enabled, true, '10-kubelet from the release sorts after 05-a');
    assert.match(unit[0]?.contents ?? '', /ExecStart/, 'a later entry merges field by field');
    assert.equal(await validate(serialize(payload, '3.3.0')), undefined);
  });

  it('when MachineConfigs carry kernel arguments, it should collect them in name order and need spec 3.3.0', async () => {
    const payload = renderPayload(release, [
      mc('50-b', { kernelArguments: ['nosmt', 'quiet'] }),
      mc('10-a', { kernelArguments: ['quiet', 'mitigations=off'] }),
    ]);
    assert.deepEqual(payload.config.kernelArguments, { shouldExist: ['quiet', 'mitigations=off', 'nosmt'] });
    assert.equal(payload.minVersion, '3.3.0');
    assert.equal(await validate(serialize(payload, '3.3.0')), undefined);
  });

  it('when KubeletConfigs are given, it should merge them in name order into the kubelet configuration file', async () => {
    const payload = renderPayload(release, [
      kc('b', { maxPods: 250, evictionHard: { 'memory.available': '200Mi' } }),
      kc('a', { maxPods: 110, evictionHard: { 'nodefs.available': '5%' } }),
    ]);
    const kubelet = JSON.parse(text(payload.config, KUBELET_CONFIG_PATH) ?? '') as Record<string, unknown>;
    assert.deepEqual(kubelet, {
      apiVersion: 'kubelet.config.k8s.io/v1beta1',
      kind: 'KubeletConfiguration',
      authentication: {
        anonymous: { enabled: false },
        webhook: { enabled: true },
        x509: { clientCAFile: '/etc/kubernetes/pki/ca.crt' },
      },
      authorization: { mode: 'Webhook' },
      rotateCertificates: true,
      serverTLSBootstrap: true,
      maxPods: 250,
      evictionHard: { 'nodefs.available': '5%', 'memory.available': '200Mi' },
    });
    assert.equal(await validate(serialize(payload, '3.2.0')), undefined);
  });

  it('when a document cannot be merged, it should refuse it with a reason naming it', () => {
    const cases: [unknown, RegExp][] = [
      [
        [
          mc('50-ca', {
            config: {
              ignition: { version: '3.2.0' },
              storage: { files: [fileOf('/etc/kubernetes/bootstrap-kubeconfig', 'x')] },
            },
          }),
        ],
        /bootstrap-kubeconfig is written by the node's join material/,
      ],
      [{}, /not a list/],
      [[{ kind: 'ContainerRuntimeConfig', metadata: { name: 'x' } }], /"ContainerRuntimeConfig": only MachineConfig/],
      [[mc('', {})], /no metadata.name/],
      [[mc('x', { config: { ignition: { version: '2.2.0' } } })], /MachineConfig x: ignition.version "2.2.0"/],
      [
        [mc('x', { config: { ignition: { version: '3.2.0', config: { merge: [{ source: 'https://evil' }] } } } })],
        /not allowed/,
      ],
      [[mc('x', { osImageURL: 'quay.io/os@sha256:1' })], /spec.osImageURL is not supported/],
      [[mc('x', { kernelArguments: 'quiet' })], /kernelArguments must be a list/],
      [
        [
          mc('x', {
            config: { ignition: { version: '3.2.0' }, storage: { directories: [{ path: '/etc/kindling/release' }] } },
          }),
        ],
        /both in storage.files and storage.directories/,
      ],
      [
        [mc('x', { config: { ignition: { version: '3.2.0' }, storage: { files: [{ path: 'relative' }] } } })],
        /not absolute/,
      ],
      [[kc('k', { staticPodPath: '/x' })], /KubeletConfig k: staticPodPath cannot be set/],
      [[{ ...kc('k', {}), spec: { kubeletConfig: {}, logLevel: 4 } }], /spec.logLevel is not supported/],
    ];
    for (const [docs, reason] of cases)
      assert.throws(
        () => renderPayload(release, docs),
        (err: unknown) => err instanceof InvalidConfigError && reason.test(err.message),
        String(reason),
      );
  });
});

describe('spec versions', () => {
  it('when a field was introduced by a version, the version before should not know it (checked by ignition-validate)', async () => {
    const samples: [SpecVersion, Record<string, unknown>][] = [
      ['3.1.0', { ignition: { proxy: { httpProxy: 'http://proxy:3128' } } }],
      [
        '3.1.0',
        {
          storage: {
            files: [{ path: '/a', contents: { source: 'https://x/a', httpHeaders: [{ name: 'a', value: 'b' }] } }],
          },
        },
      ],
      [
        '3.1.0',
        { storage: { filesystems: [{ device: '/dev/vdb', format: 'ext4', path: '/var', mountOptions: ['ro'] }] } },
      ],
      ['3.2.0', { storage: { luks: [{ name: 'data', device: '/dev/vdc' }] } }],
      ['3.2.0', { passwd: { users: [{ name: 'old', shouldExist: false }] } }],
      ['3.3.0', { kernelArguments: { shouldExist: ['quiet'] } }],
    ];
    for (const [introduced, sample] of samples) {
      assert.equal(minimumVersion(sample), introduced, JSON.stringify(sample));
      const at = (v: string): Buffer =>
        Buffer.from(JSON.stringify({ ...sample, ignition: { ...(sample.ignition as object), version: v } }));
      assert.equal(await validate(at(introduced)), undefined, `${introduced} knows ${JSON.stringify(sample)}`);
      const before = SPEC_VERSIONS[SPEC_VERSIONS.indexOf(introduced) - 1] as string;
      assert.match(
        (await validate(at(before))) ?? '',
        /Unused key/,
        `${before} does not know ${JSON.stringify(sample)}`,
      );
    }
  });

  it('when negotiating, it should serve the highest version the Accept header allows', () => {
    const cases: [string | undefined, SpecVersion | undefined][] = [
      ['application/vnd.coreos.ignition+json;version=3.3.0, */*;q=0.1', '3.3.0'],
      ['application/vnd.coreos.ignition+json; version=3.1.0', '3.1.0'],
      ['application/vnd.coreos.ignition+json;version=3.4.0-experimental', '3.3.0'],
      ['application/vnd.coreos.ignition+json;version=3.9.0', '3.4.0'],
      [
        'application/vnd.coreos.ignition+json;version=3.1.0, application/vnd.coreos.ignition+json;version=3.2.0',
        '3.2.0',
      ],
      ['application/vnd.coreos.ignition+json;version=2.2.0', undefined],
      ['application/vnd.coreos.ignition+json;version=2.2.0, */*', undefined],
      [undefined, '3.4.0'],
      ['*/*', '3.4.0'],
      ['text/html', undefined],
      ['*/*;q=0', undefined],
    ];
    for (const [accept, expected] of cases) assert.equal(negotiateVersion(accept), expected, String(accept));
  });
});

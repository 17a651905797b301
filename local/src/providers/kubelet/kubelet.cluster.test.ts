import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readFile, rm, access, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { renderPayload } from '../../../../ignition-server/src/payload/render.js';
import type { ReleaseManifest } from '../../../../ignition-server/src/release/types.js';
import { dataUrlBytes } from '../../../../support/src/data-url.js';
import * as k8s from '#k8s';
import { HOST_PATHS } from '../../../../api/src/host-paths.js';
import { BOOTSTRAP_GROUP, bootstrapPoolGroup } from '../../../../api/src/keys.js';
import { TerminalError } from '../../../../support/src/errors.js';
import { createLogger } from '../../../../support/src/logger.js';
import { verifyCertificate } from '../../../../test/bed/src/pki.js';
import { realClock } from '../../../../support/src/timers.js';
import {
  bindGroup,
  createBootstrapToken,
  decideCsr,
  eventually,
  newBootstrapToken,
  startCluster,
  tokenKubeconfigYaml,
  type Cluster,
} from '../../../../test/bed/src/index.js';
import { Kubelet, type KubeletCondition } from './kubelet.js';
import {
  KUBELET_CLIENT_SIGNER,
  KUBELET_REASONS,
  KUBELET_SERVING_SIGNER,
  apiMessage,
  bootstrapRefusal,
  csrName,
  csrOutcome,
  joinFailure,
} from './join.js';
import { kubeletConfigProblem, parseBootstrapKubeconfig, parseKubeletConfig, parseReleaseInfo } from './host-files.js';
import {
  hostStatusPatches,
  registrationNode,
  KUBELET_CONFIG_INVALID,
  KUBELET_CONFIG_REJECTED,
  type KubeletSpec,
} from './node-status.js';
import { joinMaterialFiles, releaseJson, writeHostFiles } from '../testing.js';
import { SIMULATION } from '../../../../test/bed/src/keys.js';

const log = createLogger({ name: 'kubelet-test', level: process.env.TEST_LOG_LEVEL ?? 'silent' });
const CA = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';

function kubeconfig(user: string, caData = true): string {
  return [
    'apiVersion: v1',
    'kind: Config',
    `clusters:\n- name: g\n  cluster:\n    server: https://10.0.0.1:6443${caData ? `\n    certificate-authority-data: ${Buffer.from(CA).toString('base64')}` : ''}`,
    `users:\n- name: u\n  user:\n    ${user}`,
    'contexts:\n- name: c\n  context:\n    cluster: g\n    user: u',
    'current-context: c',
  ].join('\n');
}

const spec = (over: Partial<KubeletSpec> = {}): KubeletSpec => ({
  root: '/x',
  nodeName: 'inplace-abc',
  providerID: 'kindling-local://tenants/inplace-abc',
  taints: [],
  ...over,
});
const apiError = (code: number, message: string): Error =>
  Object.assign(new Error(`HTTP-Code: ${code}`), { code, body: JSON.stringify({ kind: 'Status', message }) });

describe('kubelet: join material', () => {
  it('when the bootstrap kubeconfig names a server, CA data and a token, it should read all three', () => {
    assert.deepEqual(parseBootstrapKubeconfig(kubeconfig('token: abcdef.0123456789abcdef')), {
      server: 'https://10.0.0.1:6443',
      caPem: CA,
      token: 'abcdef.0123456789abcdef',
    });
  });

  it('when the bootstrap kubeconfig carries no CA data, it should trust the CA file, and say so when that is missing too', () => {
    assert.equal(
      parseBootstrapKubeconfig(kubeconfig('token: abcdef.0123456789abcdef', false), 'from file').caPem,
      'from file',
    );
    assert.throws(
      () => parseBootstrapKubeconfig(kubeconfig('token: abcdef.0123456789abcdef', false)),
      /no certificate-authority-data and \/etc\/kubernetes\/pki\/ca.crt is missing/,
    );
  });

  it('when the bootstrap kubeconfig holds no token or is not YAML, it should say what is wrong', () => {
    assert.throws(() => parseBootstrapKubeconfig(kubeconfig('username: admin')), /holds no bootstrap token/);
    assert.throws(() => parseBootstrapKubeconfig('{ not: [ yaml'), /is not a kubeconfig/);
  });

  it('when the kubelet config is a KubeletConfiguration, it should take its registration taints, and refuse anything else', () => {
    const taints = [{ key: 'dedicated', value: 'gpu', effect: 'NoSchedule' }];
    assert.deepEqual(
      parseKubeletConfig(JSON.stringify({ kind: 'KubeletConfiguration', registerWithTaints: taints }))
        .registerWithTaints,
      taints,
    );
    assert.deepEqual(parseKubeletConfig('{"kind":"KubeletConfiguration"}').registerWithTaints, []);
    assert.throws(() => parseKubeletConfig('maxPods: 10'), /is not JSON/);
    assert.throws(() => parseKubeletConfig('{"kind":"ConfigMap"}'), /is not a KubeletConfiguration/);
  });

  it('when the release file is there, it should give the kubelet version and OS image; nothing when it is missing or broken', () => {
    assert.deepEqual(parseReleaseInfo(releaseJson('v1.36.2')), {
      kubeletVersion: 'v1.36.2',
      osImage: 'Kindling Linux 1.36.2',
    });
    assert.deepEqual(parseReleaseInfo(undefined), {});
    assert.deepEqual(parseReleaseInfo('{'), {});
  });
});

describe('kubelet: a config it refuses', () => {
  const config = (extra: object): string =>
    JSON.stringify({ apiVersion: 'kubelet.config.k8s.io/v1beta1', kind: 'KubeletConfiguration', ...extra });
  const cases: { condition: string; text: string | undefined; want: RegExp | undefined }[] = [
    {
      condition: 'the config is a valid KubeletConfiguration',
      text: config({ maxPods: 110, healthzPort: 10248, imageGCHighThresholdPercent: 85 }),
      want: undefined,
    },
    { condition: 'the config is missing', text: undefined, want: /kubelet\.conf is missing/ },
    { condition: 'the config is not JSON', text: 'maxPods: 10', want: /is not JSON/ },
    {
      condition: 'the config is another kind',
      text: JSON.stringify({ kind: 'Pod' }),
      want: /is not a KubeletConfiguration/,
    },
    {
      condition: 'maxPods is negative',
      text: config({ maxPods: -1 }),
      want: /^invalid configuration: maxPods \(--max-pods\) -1 must not be a negative number$/,
    },
    {
      condition: 'healthzPort is out of range',
      text: config({ healthzPort: 70000 }),
      want: /healthzPort \(--healthz-port\) 70000 must be between 1 and 65535, inclusive/,
    },
    {
      condition: 'imageGCHighThresholdPercent is above 100',
      text: config({ imageGCHighThresholdPercent: 101 }),
      want: /imageGCHighThresholdPercent/,
    },
    {
      condition: 'maxPods is a string',
      text: config({ maxPods: 'many' }),
      want: /failed to decode .*: maxPods must be a number/,
    },
  ];
  for (const c of cases) {
    it(`when ${c.condition}, it should ${c.want ? 'refuse it with the reason' : 'accept it'}`, () => {
      const problem = kubeletConfigProblem(c.text);
      if (c.want) assert.match(problem ?? '', c.want);
      else assert.equal(problem, undefined);
    });
  }

  it('when the config is refused, it should set the annotation before reporting Ready=False with this boot and version in one status patch', () => {
    const now = new Date('2026-01-01T00:00:00Z');
    const patches = hostStatusPatches(
      { release: { kubeletVersion: 'v1.36.3' }, bootId: 'b1', configProblem: 'invalid configuration: x' },
      undefined,
      now,
    );
    assert.deepEqual(patches.metadata, { annotations: { [SIMULATION.hostDown]: KUBELET_CONFIG_REJECTED } });
    assert.deepEqual(patches.status, {
      nodeInfo: { bootID: 'b1', kubeletVersion: 'v1.36.3' },
      conditions: [
        {
          type: 'Ready',
          status: 'False',
          reason: KUBELET_CONFIG_INVALID,
          message: 'kubelet cannot start: invalid configuration: x',
          lastHeartbeatTime: now,
          lastTransitionTime: now,
        },
      ],
    });
  });

  it('when the config is valid again, it should remove only its own annotation and leave Ready to the heartbeat', () => {
    const ok = { release: {}, bootId: 'b2' };
    assert.deepEqual(hostStatusPatches(ok, KUBELET_CONFIG_REJECTED, new Date()), {
      metadata: { annotations: { [SIMULATION.hostDown]: null } },
      status: { nodeInfo: { bootID: 'b2' } },
    });
    // "true" is a test's dead host: not the kubelet's to clear.
    assert.equal(hostStatusPatches(ok, 'true', new Date()).metadata, undefined);
    assert.equal(hostStatusPatches({ ...ok, configProblem: 'x' }, 'true', new Date()).metadata, undefined);
  });
});

describe('kubelet: the sample releases', () => {
  const releases = fileURLToPath(new URL('../../../../../local/releases/', import.meta.url));
  const kubeletConfigOf = async (version: string): Promise<string | undefined> => {
    const read = async (path: string): Promise<Record<string, unknown>> =>
      JSON.parse(await readFile(join(releases, version, path), 'utf8')) as Record<string, unknown>;
    const release = {
      digest: 'sha256:0',
      manifest: (await read('release.json')) as unknown as ReleaseManifest,
      fragments: [{ name: '00-base.json', config: await read('ignition/00-base.json') }],
    };
    const files =
      (renderPayload(release, []).config.storage as { files?: { path: string; contents: { source: string } }[] })
        .files ?? [];
    const source = files.find((f) => f.path === HOST_PATHS.kubeletConfig)?.contents.source;
    return source === undefined ? undefined : dataUrlBytes(source)?.toString('utf8');
  };

  it('when 1.36.3-broken-kubelet is rendered, its kubelet config should be one the kubelet refuses; 1.36.3 one it takes', async () => {
    assert.match(
      kubeletConfigProblem(await kubeletConfigOf('1.36.3-broken-kubelet')) ?? '',
      /^invalid configuration: maxPods \(--max-pods\) -1 must not be a negative number$/,
    );
    assert.equal(kubeletConfigProblem(await kubeletConfigOf('1.36.3')), undefined);
  });
});

describe('kubelet: the Node it registers', () => {
  it("when the machine has a zone and taints, it should register them with its hostname, providerID and the release's version", () => {
    const node = registrationNode(
      spec({ zone: 'zone-b', taints: [{ key: 'pool', value: 'a', effect: 'NoSchedule' }] }),
      {
        registerWithTaints: [
          { key: 'pool', value: 'config', effect: 'NoSchedule' },
          { key: 'gpu', effect: 'NoExecute' },
        ],
        release: { kubeletVersion: 'v1.36.2', osImage: 'Kindling Linux 1.36.2' },
      },
    );
    assert.equal(node.metadata?.name, 'inplace-abc');
    assert.deepEqual(node.metadata?.labels, {
      'kubernetes.io/hostname': 'inplace-abc',
      'kubernetes.io/os': 'linux',
      'kindling.dev/host': 'local',
      'topology.kubernetes.io/zone': 'zone-b',
    });
    assert.equal(node.spec?.providerID, 'kindling-local://tenants/inplace-abc');
    // The Machine's taint wins over the kubelet config's for the same key and effect.
    assert.deepEqual(node.spec?.taints, [
      { key: 'pool', value: 'a', effect: 'NoSchedule' },
      { key: 'gpu', value: undefined, effect: 'NoExecute' },
    ]);
    assert.equal(node.status?.nodeInfo?.kubeletVersion, 'v1.36.2');
    assert.equal(node.status?.nodeInfo?.osImage, 'Kindling Linux 1.36.2');
  });

  it('when the machine has no zone, it should set no zone label', () => {
    assert.equal(
      registrationNode(spec(), { registerWithTaints: [], release: {} }).metadata?.labels?.[
        'topology.kubernetes.io/zone'
      ],
      undefined,
    );
  });
});

describe('kubelet: CSRs', () => {
  it('when the same key asks for the same thing twice, it should give the same valid name; another key or subject another name', () => {
    const asked = [KUBELET_CLIENT_SIGNER, 'system:node:a', 'system:nodes'];
    const a = csrName('node-csr-', 'key-a', asked);
    assert.equal(csrName('node-csr-', 'key-a', [...asked]), a);
    assert.notEqual(csrName('node-csr-', 'key-b', asked), a);
    assert.notEqual(csrName('node-csr-', 'key-a', [KUBELET_CLIENT_SIGNER, 'system:node:b', 'system:nodes']), a);
    assert.match(a, /^node-csr-[a-z0-9]+$/);
    assert.ok(a.length <= 63);
  });

  const csr = (status: k8s.V1CertificateSigningRequestStatus): k8s.V1CertificateSigningRequest => ({
    spec: { request: '', signerName: KUBELET_CLIENT_SIGNER },
    status,
  });
  const cases: [string, k8s.V1CertificateSigningRequestStatus, ReturnType<typeof csrOutcome>][] = [
    ['nothing decided', {}, { state: 'pending', approved: false }],
    [
      'approved, not signed yet',
      { conditions: [{ type: 'Approved', status: 'True', reason: 'KindlingApproved' }] },
      { state: 'pending', approved: true },
    ],
    [
      'signed',
      { conditions: [{ type: 'Approved', status: 'True' }], certificate: Buffer.from('PEM').toString('base64') },
      { state: 'issued', certPem: 'PEM' },
    ],
    [
      'denied',
      {
        conditions: [
          { type: 'Denied', status: 'True', reason: 'NoMachine', message: 'no Machine of pool a is named x' },
        ],
      },
      { state: 'denied', message: 'NoMachine: no Machine of pool a is named x' },
    ],
    [
      'failed by the signer',
      {
        conditions: [
          { type: 'Approved', status: 'True' },
          { type: 'Failed', status: 'True', reason: 'SignerValidationFailure', message: 'bad usages' },
        ],
      },
      { state: 'failed', message: 'SignerValidationFailure: bad usages' },
    ],
  ];
  for (const [name, status, expected] of cases) {
    it(`when a CSR is ${name}, it should read as ${expected.state}`, () => {
      assert.deepEqual(csrOutcome(csr(status)), expected);
    });
  }

  it('when the apiserver refuses the bootstrap token or its RBAC, it should say which and keep retrying; a denial gives up', () => {
    assert.deepEqual(joinFailure(bootstrapRefusal(apiError(401, 'Unauthorized'))), {
      reason: KUBELET_REASONS.bootstrapTokenRejected,
      message:
        'the guest apiserver refused the bootstrap token (401 Unauthorized): it expired, was deleted or never existed',
      terminal: false,
    });
    const forbidden = joinFailure(
      bootstrapRefusal(apiError(403, 'User "system:bootstrap:abcdef" cannot create resource')),
    );
    assert.equal(forbidden.reason, KUBELET_REASONS.bootstrapForbidden);
    assert.match(forbidden.message, /cannot create resource/);
    assert.equal(joinFailure(new TerminalError('CSR x was denied: no', KUBELET_REASONS.csrDenied)).terminal, true);
    assert.deepEqual(joinFailure(new Error('connect ECONNREFUSED')), {
      reason: KUBELET_REASONS.apiserverUnreachable,
      message: 'connect ECONNREFUSED',
      terminal: false,
    });
    assert.equal(apiMessage(apiError(500, 'etcdserver: timeout')), 'etcdserver: timeout');
  });
});

/** A kubelet on a host root, its reported conditions collected as the LocalMachine would show them. */
class HostUnderTest {
  readonly conditions = new Map<string, KubeletCondition>();
  readonly #abort = new AbortController();
  done: Promise<void> = Promise.resolve();

  constructor(
    readonly root: string,
    readonly name: string,
  ) {}

  start(): this {
    const kubelet = new Kubelet(
      {
        root: this.root,
        nodeName: this.name,
        providerID: `kindling-local://tenants/${this.name}`,
        zone: 'zone-a',
        taints: [{ key: 'pool', value: 'a', effect: 'NoSchedule' }],
      },
      {
        log,
        clock: realClock,
        signal: this.#abort.signal,
        // The default CSR poll (500 ms), so the boot-to-Ready figure is the one hosts see.
        timing: { retryMs: 100, maxRetryMs: 500, statusSyncMs: 200 },
        report: async (c) => void this.conditions.set(c.type, c),
      },
    );
    this.done = kubelet.run();
    return this;
  }

  async stop(): Promise<void> {
    this.#abort.abort();
    await this.done;
  }

  condition(type: string, reason: string): KubeletCondition | undefined {
    const c = this.conditions.get(type);
    return c?.reason === reason ? c : undefined;
  }
}

interface AuditEvent {
  verb: string;
  user: { username: string; groups?: string[] };
  objectRef?: { resource?: string; subresource?: string; name?: string };
  responseStatus?: { code?: number };
}

describe('kubelet against a hosted guest control plane (test bed)', () => {
  let guest: Cluster;
  let certificates: k8s.CertificatesV1Api;
  let core: k8s.CoreV1Api;
  const roots: string[] = [];
  const hosts: HostUnderTest[] = [];

  const newHost = async (name: string, files?: Record<string, string>): Promise<HostUnderTest> => {
    const root = await mkdtemp(join(tmpdir(), `kindling-host-${name}-`));
    roots.push(root);
    if (files) await writeHostFiles(root, files);
    const host = new HostUnderTest(root, name);
    hosts.push(host);
    return host;
  };
  const csrOf = (username: string, signer: string): Promise<k8s.V1CertificateSigningRequest> =>
    eventually(
      `a ${signer} CSR from ${username}`,
      async () =>
        (await certificates.listCertificateSigningRequest()).items.find(
          (c) => c.spec.username === username && c.spec.signerName === signer,
        ),
      30_000,
      20,
    );
  const audit = async (): Promise<AuditEvent[]> =>
    (await readFile(guest.auditLogPath ?? '', 'utf8'))
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as AuditEvent);

  before(async () => {
    guest = await startCluster({ name: 'guest', nodeAuth: true, kwok: true, audit: true });
    certificates = guest.kubeConfig.makeApiClient(k8s.CertificatesV1Api);
    core = guest.kubeConfig.makeApiClient(k8s.CoreV1Api);
    await bindGroup(guest, BOOTSTRAP_GROUP, 'system:node-bootstrapper');
  });
  after(async () => {
    await Promise.all(hosts.map((h) => h.stop()));
    await guest?.stop();
    await Promise.all(roots.map((r) => rm(r, { recursive: true, force: true })));
  });

  describe('a host whose client CSR is approved', () => {
    let host: HostUnderTest;
    let node: k8s.V1Node;

    it('when its client CSR is approved, it should register its Node and KWOK should make it Ready', async (t) => {
      const token = await createBootstrapToken(guest, {
        groups: [BOOTSTRAP_GROUP, bootstrapPoolGroup('tenants', 'a')],
      });
      host = await newHost(
        'host-a',
        joinMaterialFiles(guest, {
          token: token.token,
          registerWithTaints: [{ key: 'kubelet-config', effect: 'PreferNoSchedule' }],
        }),
      );
      const booted = Date.now();
      host.start();

      const csr = await csrOf(token.username, KUBELET_CLIENT_SIGNER);
      assert.ok(csr.spec.groups?.includes(bootstrapPoolGroup('tenants', 'a')));
      assert.deepEqual(csr.spec.usages, ['digital signature', 'client auth']);
      await eventually('the kubelet to say it waits for approval', async () =>
        host.condition('Joined', KUBELET_REASONS.waitingForApproval),
      );
      await decideCsr(guest, csr.metadata?.name ?? '', { approve: true });

      node = await eventually(
        'the Node to be Ready',
        async () => {
          const n = await core.readNode({ name: 'host-a' });
          return n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ? n : undefined;
        },
        60_000,
        20,
      );
      t.diagnostic(`host boot (join material on disk) to Node Ready: ${Date.now() - booted} ms`);
      assert.equal(host.conditions.get('Joined')?.status, 'True');
    });

    it("when registered, the Node should carry the release's version, its providerID, zone and registration taints", () => {
      const { status = {}, spec: nodeSpec = {}, metadata = {} } = node;
      assert.equal(status.nodeInfo?.kubeletVersion, 'v1.36.2');
      assert.equal(status.nodeInfo?.osImage, 'Kindling Linux 1.36.2');
      assert.equal(nodeSpec.providerID, 'kindling-local://tenants/host-a');
      assert.equal(metadata.labels?.['topology.kubernetes.io/zone'], 'zone-a');
      const taints = (nodeSpec.taints ?? []).map((x) => `${x.key}:${x.effect}`);
      assert.ok(
        taints.includes('pool:NoSchedule') && taints.includes('kubelet-config:PreferNoSchedule'),
        `registration taints missing: ${taints.join(', ')}`,
      );
    });

    it('when registered, the Node should have been created by system:node:<name> with the certificate csrsigning issued', async () => {
      const created = (await audit()).find(
        (e) =>
          e.verb === 'create' &&
          e.objectRef?.resource === 'nodes' &&
          e.objectRef.name === 'host-a' &&
          e.responseStatus?.code === 201,
      );
      assert.equal(created?.user.username, 'system:node:host-a', 'the Node was not created by the kubelet itself');
      assert.ok(created.user.groups?.includes('system:nodes'));
      const pem = await readFile(join(host.root, HOST_PATHS.kubeletClientCert), 'utf8');
      assert.equal((await verifyCertificate(pem, guest.ca.certPem)).commonName, 'system:node:host-a');
      assert.match(
        await readFile(join(host.root, HOST_PATHS.kubeletKubeconfig), 'utf8'),
        /client-certificate: \/var\/lib\/kubelet\/pki\/kubelet-client-current.pem/,
      );
      await assert.rejects(access(join(host.root, HOST_PATHS.kubeletClientKeyPending)));
    });

    it('when joined, it should ask for a serving certificate as the node, for its hostname and address', async () => {
      const serving = await csrOf('system:node:host-a', KUBELET_SERVING_SIGNER);
      await decideCsr(guest, serving.metadata?.name ?? '', { approve: true });
      await eventually(
        'the serving certificate',
        async () => host.condition('ServingCertificate', KUBELET_REASONS.issued),
        30_000,
      );
      assert.match(await readFile(join(host.root, HOST_PATHS.kubeletServingCert), 'utf8'), /BEGIN CERTIFICATE/);
    });

    it('when an in-place upgrade rewrites the release file, it should report the new kubelet version itself', async () => {
      await writeFile(join(host.root, HOST_PATHS.releaseInfo), releaseJson('v1.36.3'));
      await eventually(
        'the Node to report v1.36.3',
        async () => (await core.readNode({ name: 'host-a' })).status?.nodeInfo?.kubeletVersion === 'v1.36.3',
        30_000,
      );
      const patched = (await audit()).filter(
        (e) =>
          e.verb === 'patch' &&
          e.objectRef?.name === 'host-a' &&
          e.objectRef.subresource === 'status' &&
          e.user.username === 'system:node:host-a',
      );
      assert.ok(patched.length > 0, 'the version was not reported by the kubelet itself');
    });

    it('when the host reboots into a kubelet config the kubelet rejects, it should report Ready=False with the reason and the new boot ID; Ready again once the config is restored', async () => {
      const readyOf = (n: k8s.V1Node): k8s.V1NodeCondition | undefined =>
        n.status?.conditions?.find((c) => c.type === 'Ready');
      const good = await readFile(join(host.root, HOST_PATHS.kubeletConfig), 'utf8');
      await mkdir(join(host.root, dirname(HOST_PATHS.bootId)), { recursive: true });
      await writeFile(join(host.root, HOST_PATHS.kubeletConfig), JSON.stringify({ ...JSON.parse(good), maxPods: -1 }));
      await writeFile(join(host.root, HOST_PATHS.bootId), 'boot-broken\n');
      const down = await eventually(
        'the Node to be not Ready with the boot ID',
        async () => {
          const n = await core.readNode({ name: 'host-a' });
          return n.status?.nodeInfo?.bootID === 'boot-broken' && readyOf(n)?.status === 'False' ? n : undefined;
        },
        30_000,
      );
      assert.equal(readyOf(down)?.reason, KUBELET_CONFIG_INVALID);
      assert.match(readyOf(down)?.message ?? '', /maxPods \(--max-pods\) -1 must not be a negative number/);
      assert.equal(down.metadata?.annotations?.[SIMULATION.hostDown], KUBELET_CONFIG_REJECTED);
      // KWOK leaves it not Ready (no heartbeat stage selects it) for as long as the config is refused.
      await new Promise((r) => setTimeout(r, 2_000));
      assert.equal(readyOf(await core.readNode({ name: 'host-a' }))?.status, 'False');

      await writeFile(join(host.root, HOST_PATHS.kubeletConfig), good);
      await writeFile(join(host.root, HOST_PATHS.bootId), 'boot-restored\n');
      const up = await eventually(
        'the Node to be Ready again',
        async () => {
          const n = await core.readNode({ name: 'host-a' });
          return n.status?.nodeInfo?.bootID === 'boot-restored' && readyOf(n)?.status === 'True' ? n : undefined;
        },
        30_000,
      );
      assert.equal(up.metadata?.annotations?.[SIMULATION.hostDown], undefined);
    });

    it('when restarted, it should resume from the root with the same certificate and no new CSR', async () => {
      const pem = await readFile(join(host.root, HOST_PATHS.kubeletClientCert), 'utf8');
      await host.stop();
      const before = (await certificates.listCertificateSigningRequest()).items.length;
      const again = new HostUnderTest(host.root, 'host-a');
      hosts.push(again);
      again.start();
      await eventually(
        'the restarted kubelet to be joined',
        async () => again.condition('Joined', KUBELET_REASONS.joined),
        30_000,
      );
      assert.equal((await certificates.listCertificateSigningRequest()).items.length, before);
      assert.equal(await readFile(join(host.root, HOST_PATHS.kubeletClientCert), 'utf8'), pem);
    });
  });

  it('when restarted while its client CSR waits, it should wait for the same CSR and join once it is approved', async () => {
    const token = await createBootstrapToken(guest, { groups: [BOOTSTRAP_GROUP] });
    const first = (await newHost('host-f', joinMaterialFiles(guest, { token: token.token }))).start();
    const csr = await csrOf(token.username, KUBELET_CLIENT_SIGNER);
    await eventually('the kubelet to wait for approval', async () =>
      first.condition('Joined', KUBELET_REASONS.waitingForApproval),
    );
    await first.stop();
    const again = new HostUnderTest(first.root, 'host-f');
    hosts.push(again);
    again.start();
    await eventually('the restarted kubelet to wait for approval', async () =>
      again.condition('Joined', KUBELET_REASONS.waitingForApproval),
    );
    assert.match(again.conditions.get('Joined')?.message ?? '', new RegExp(`CSR ${csr.metadata?.name ?? '?'} `));
    const mine = (await certificates.listCertificateSigningRequest()).items.filter(
      (c) => c.spec.username === token.username,
    );
    assert.equal(mine.length, 1, 'the restarted kubelet submitted a second CSR');
    await decideCsr(guest, csr.metadata?.name ?? '', { approve: true });
    await eventually(
      'the restarted kubelet to join',
      async () => again.condition('Joined', KUBELET_REASONS.joined),
      30_000,
    );
  });

  it("when its client CSR is denied, it should stay unjoined and say CSRDenied with the denial's message", async () => {
    const token = await createBootstrapToken(guest, { groups: [BOOTSTRAP_GROUP, bootstrapPoolGroup('tenants', 'b')] });
    const host = (await newHost('host-b', joinMaterialFiles(guest, { token: token.token }))).start();
    const csr = await csrOf(token.username, KUBELET_CLIENT_SIGNER);
    await decideCsr(guest, csr.metadata?.name ?? '', {
      approve: false,
      message: 'host-b matches no Machine of pool tenants/b',
    });
    const denied = await eventually(
      'CSRDenied',
      async () => host.condition('Joined', KUBELET_REASONS.csrDenied),
      30_000,
    );
    assert.match(denied.message, /was denied: DeniedByTest: host-b matches no Machine of pool tenants\/b/);
    assert.equal(denied.status, 'False');
    await host.done; // it gives up
    await assert.rejects(core.readNode({ name: 'host-b' }), (err: { code?: number }) => err.code === 404);
  });

  it('when its bootstrap token is unknown, it should say BootstrapTokenRejected and keep trying until the token exists', async () => {
    const token = newBootstrapToken();
    const host = (await newHost('host-c', joinMaterialFiles(guest, { token }))).start();
    const rejected = await eventually(
      'BootstrapTokenRejected',
      async () => host.condition('Joined', KUBELET_REASONS.bootstrapTokenRejected),
      30_000,
    );
    assert.match(rejected.message, /401 Unauthorized/);
    assert.doesNotMatch(
      rejected.message,
      new RegExp(token.split('.')[1] ?? 'x'),
      'the token secret leaked into the condition',
    );
    await createBootstrapToken(guest, { groups: [BOOTSTRAP_GROUP], token });
    await eventually(
      'the CSR once the token exists',
      async () => host.condition('Joined', KUBELET_REASONS.waitingForApproval),
      30_000,
    );
  });

  it('when its payload carries no join material, it should say NoJoinMaterial, naming what is missing, and give up', async () => {
    const host = (await newHost('host-d', { [HOST_PATHS.releaseInfo]: releaseJson('v1.36.2') })).start();
    await host.done;
    const c = host.condition('Joined', KUBELET_REASONS.noJoinMaterial);
    assert.match(
      c?.message ?? '',
      /\/etc\/kubernetes\/bootstrap-kubeconfig and \/etc\/kubernetes\/kubelet.conf missing/,
    );
  });

  it('when its bootstrap kubeconfig is not one, it should say NoJoinMaterial with what is wrong', async () => {
    const files = joinMaterialFiles(guest, { token: newBootstrapToken() });
    files[HOST_PATHS.bootstrapKubeconfig] = tokenKubeconfigYaml(guest, '').replace(/token: .*/, 'username: nobody');
    const host = (await newHost('host-e', files)).start();
    await host.done;
    assert.match(host.condition('Joined', KUBELET_REASONS.noJoinMaterial)?.message ?? '', /holds no bootstrap token/);
  });
});

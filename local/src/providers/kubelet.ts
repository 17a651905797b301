/**
 * A host's kubelet, simulated in process by the local providers (one task per host). It joins the guest
 * cluster the way a real kubelet does, with nothing but what Ignition wrote into the host's root: from the
 * bootstrap kubeconfig it submits a `kubernetes.io/kube-apiserver-client-kubelet` CSR for
 * `system:node:<name>`, waits until someone approves it (Kindling's CSR approver) and the guest's csrsigning
 * issues the certificate, then registers its Node with that certificate — so the Node authorizer and
 * NodeRestriction hold it to its own Node. KWOK keeps the Node's heartbeat; the kubelet reports its version
 * from the release file and keeps it current after an in-place upgrade. It also asks for a serving
 * certificate, without holding up the join.
 *
 * A `systemctl restart kubelet.service` of the in-place agent (HOST_PATHS.simulatedSystemctl) restarts it as far
 * as anyone can see: it reads its config and release file again and reports its status anew (Ready again only
 * if its config is valid).
 *
 * Resumable from the root alone: a restarted kubelet reuses a valid client certificate, or waits for the CSR
 * its pending key names (the CSR's name is a digest of key and request, as the kubelet's own is).
 */
import { createHash } from 'node:crypto';
import * as k8s from '#k8s';
import { HOST_PATHS } from '../../../api/src/host-paths.js';
import { LABELS } from '../../../api/src/keys.js';
import { makeApiClient } from '../../../support/src/kubeconfig.js';
import { statusCode, TerminalError } from '../../../support/src/errors.js';
import type { Logger } from '../../../support/src/logger.js';
import { createCertificateRequest, verifyCertificate } from '../../../test/bed/src/pki.js';
import type { Clock } from '../../../support/src/timers.js';
import { HostFs } from './host-fs.js';
import { SIMULATION } from '../../../test/bed/src/keys.js';

export const KUBELET_CLIENT_SIGNER = 'kubernetes.io/kube-apiserver-client-kubelet';
export const KUBELET_SERVING_SIGNER = 'kubernetes.io/kubelet-serving';
const CLIENT_USAGES = ['digital signature', 'client auth'];
const SERVING_USAGES = ['digital signature', 'server auth'];

/** Condition types the kubelet reports on its host's LocalMachine. */
const KUBELET_CONDITIONS = {
  /** Whether the host joined the guest cluster as a Node of its own. */
  joined: 'Joined',
  /** Whether the kubelet holds a serving certificate (never holds up Joined). */
  servingCertificate: 'ServingCertificate',
} as const;

/** Reasons of the Joined and ServingCertificate conditions. */
export const KUBELET_REASONS = {
  joined: 'Joined',
  issued: 'Issued',
  noJoinMaterial: 'NoJoinMaterial',
  bootstrapTokenRejected: 'BootstrapTokenRejected',
  bootstrapForbidden: 'BootstrapForbidden',
  waitingForApproval: 'WaitingForApproval',
  csrDenied: 'CSRDenied',
  csrFailed: 'CSRFailed',
  registrationRefused: 'RegistrationRefused',
  apiserverUnreachable: 'APIServerUnreachable',
} as const;

export interface KubeletCondition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason: string;
  message: string;
}

export interface KubeletTiming {
  /** Deadline of each apiserver request (client-node sets none). */
  requestTimeoutMs: number;
  /** How often a pending CSR is read again. */
  pollMs: number;
  /** How long one wait for approval lasts before the condition says so and the wait starts over. */
  approvalTimeoutMs: number;
  /** First and longest delay between attempts after a refusal or an error. */
  retryMs: number;
  maxRetryMs: number;
  /** How often the release file is read to report a new kubelet version. */
  statusSyncMs: number;
}

const KUBELET_TIMING: Readonly<KubeletTiming> = Object.freeze({
  requestTimeoutMs: 15_000,
  pollMs: 500,
  approvalTimeoutMs: 10 * 60_000,
  retryMs: 1_000,
  maxRetryMs: 30_000,
  statusSyncMs: 5_000,
});

/** What the host is, as the machine and its cloud metadata tell its kubelet. */
export interface KubeletSpec {
  /** The host's root folder. */
  root: string;
  /** The host's hostname: its Node's name. */
  nodeName: string;
  providerID: string;
  /** The zone, when the machine has one (topology.kubernetes.io/zone). */
  zone?: string;
  /** Taints to register with (the Machine's spec.taints), besides the kubelet config's registerWithTaints. */
  taints: k8s.V1Taint[];
}

export interface KubeletDeps {
  log: Logger;
  clock: Clock;
  signal: AbortSignal;
  timing?: Partial<KubeletTiming>;
  /** Records a condition on the host's LocalMachine. */
  report(condition: KubeletCondition): Promise<void>;
}

/** A refusal the kubelet keeps retrying (the token may arrive, RBAC may be applied, an approval may come). */
class RetryableJoinError extends Error {
  override readonly name = 'RetryableJoinError';
  constructor(
    message: string,
    readonly reason: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

// ---- pure parts ----

export interface BootstrapMaterial {
  server: string;
  caPem: string;
  token: string;
}

/** The cluster and token of a bootstrap kubeconfig; `caPem` stands in when it carries no CA data. */
export function parseBootstrapKubeconfig(yaml: string, caPem?: string): BootstrapMaterial {
  const kc = new k8s.KubeConfig();
  try {
    kc.loadFromString(yaml);
  } catch (err) {
    throw new Error(`${HOST_PATHS.bootstrapKubeconfig} is not a kubeconfig: ${(err as Error).message}`, { cause: err });
  }
  const cluster = kc.getCurrentCluster();
  const user = kc.getCurrentUser();
  if (!cluster?.server) throw new Error(`${HOST_PATHS.bootstrapKubeconfig} names no cluster server`);
  if (!user?.token) throw new Error(`${HOST_PATHS.bootstrapKubeconfig} holds no bootstrap token`);
  const ca = cluster.caData ? Buffer.from(cluster.caData, 'base64').toString() : caPem;
  if (!ca)
    throw new Error(
      `${HOST_PATHS.bootstrapKubeconfig} has no certificate-authority-data and ${HOST_PATHS.guestCa} is missing`,
    );
  return { server: cluster.server, caPem: ca, token: user.token };
}

/** The registration taints of a KubeletConfiguration (JSON). */
export function parseKubeletConfig(json: string): { registerWithTaints: k8s.V1Taint[] } {
  let doc: unknown;
  try {
    doc = JSON.parse(json);
  } catch (err) {
    throw new Error(`${HOST_PATHS.kubeletConfig} is not JSON: ${(err as Error).message}`, { cause: err });
  }
  const config = doc as { kind?: unknown; registerWithTaints?: unknown };
  if (typeof doc !== 'object' || doc === null || config.kind !== 'KubeletConfiguration')
    throw new Error(`${HOST_PATHS.kubeletConfig} is not a KubeletConfiguration`);
  const taints = Array.isArray(config.registerWithTaints) ? (config.registerWithTaints as k8s.V1Taint[]) : [];
  return { registerWithTaints: taints.filter((t) => typeof t.key === 'string' && typeof t.effect === 'string') };
}

/**
 * Why the kubelet would refuse to start with this configuration, or undefined when it would start: not JSON,
 * not a KubeletConfiguration, or a value the kubelet's own validation rejects (the checks below carry its
 * messages, from k8s.io/kubernetes pkg/kubelet/apis/config/validation). A host whose kubelet.conf is refused
 * has no running kubelet: its Node stops being Ready (the simulated kubelet reports that, see Kubelet).
 */
export function kubeletConfigProblem(json: string | undefined): string | undefined {
  if (json === undefined) return `${HOST_PATHS.kubeletConfig} is missing`;
  try {
    parseKubeletConfig(json);
  } catch (err) {
    return (err as Error).message;
  }
  const config = JSON.parse(json) as Record<string, unknown>;
  const rules = Object.entries(KUBELET_RULES).filter(([field]) => config[field] !== undefined);
  const notNumbers = rules.filter(([field]) => typeof config[field] !== 'number').map(([field]) => field);
  if (notNumbers.length > 0)
    return `failed to decode ${HOST_PATHS.kubeletConfig}: ${notNumbers.join(', ')} must be a number`;
  const errors = rules
    .map(([field, rule]) => rule(config[field] as number))
    .filter((e): e is string => e !== undefined);
  return errors.length > 0 ? `invalid configuration: ${errors.join(', ')}` : undefined;
}

/** Numeric fields the kubelet validates, with its own messages. */
const KUBELET_RULES: Record<string, (v: number) => string | undefined> = {
  maxPods: (v) => (v < 0 ? `maxPods (--max-pods) ${v} must not be a negative number` : undefined),
  healthzPort: (v) =>
    v !== 0 && !(v >= 1 && v <= 65535)
      ? `healthzPort (--healthz-port) ${v} must be between 1 and 65535, inclusive`
      : undefined,
  imageGCHighThresholdPercent: (v) =>
    !(v >= 0 && v <= 100)
      ? `imageGCHighThresholdPercent (--image-gc-high-threshold) ${v} must be between 0 and 100, inclusive`
      : undefined,
};

/** Value of SIMULATION.hostDown the kubelet writes while it rejects its config (tests write "true" for a
 * dead host: the kubelet never removes that one). */
export const KUBELET_CONFIG_REJECTED = 'kubelet-config-rejected';
/** Reason of the Ready=False condition the kubelet reports while it rejects its config. */
export const KUBELET_CONFIG_INVALID = 'KubeletConfigInvalid';

/** What the kubelet reports in its Node's status after each look at the host root. */
export interface HostStatus {
  release: ReleaseInfo;
  /** This boot's ID (HOST_PATHS.bootId), when the host has one. */
  bootId?: string;
  /** Why the kubelet config is refused (kubeletConfigProblem). */
  configProblem?: string;
}

/**
 * The Node patches that report a host's status: the annotation first (so KWOK stops marking the Node Ready
 * before the status says it is not), then nodeInfo (boot ID, versions) and, while the config is refused,
 * Ready=False, in one status patch: no reader sees this boot's ID with a Ready left from before.
 * `annotation`: what SIMULATION.hostDown is now.
 */
export function hostStatusPatches(
  status: HostStatus,
  annotation: string | undefined,
  now: Date,
): { metadata?: object; status: object } {
  const metadata = hostDownPatch(status.configProblem !== undefined, annotation);
  const nodeInfo: Record<string, string> = {};
  if (status.bootId) nodeInfo.bootID = status.bootId;
  if (status.release.kubeletVersion) nodeInfo.kubeletVersion = status.release.kubeletVersion;
  if (status.release.osImage) nodeInfo.osImage = status.release.osImage;
  const conditions =
    status.configProblem === undefined
      ? undefined
      : [
          {
            type: 'Ready',
            status: 'False',
            reason: KUBELET_CONFIG_INVALID,
            message: `kubelet cannot start: ${status.configProblem}`,
            lastHeartbeatTime: now,
            lastTransitionTime: now,
          },
        ];
  return { ...(metadata ? { metadata } : {}), status: { nodeInfo, ...(conditions ? { conditions } : {}) } };
}

/** Sets the annotation while the config is refused (unless a test put "true" there), removes only its own. */
function hostDownPatch(rejected: boolean, annotation: string | undefined): object | undefined {
  if (rejected && annotation === undefined) return { annotations: { [SIMULATION.hostDown]: KUBELET_CONFIG_REJECTED } };
  if (!rejected && annotation === KUBELET_CONFIG_REJECTED) return { annotations: { [SIMULATION.hostDown]: null } };
  return undefined;
}

export interface ReleaseInfo {
  kubeletVersion?: string;
  osImage?: string;
}

/** The kubelet's version and OS image from the release file; nothing when it is missing or unreadable. */
export function parseReleaseInfo(json: string | undefined): ReleaseInfo {
  if (json === undefined) return {};
  try {
    const r = JSON.parse(json) as Record<string, unknown>;
    const str = (v: unknown): string | undefined => (typeof v === 'string' && v !== '' ? v : undefined);
    return { kubeletVersion: str(r.kubeletVersion), osImage: str(r.osImage) };
  } catch {
    return {};
  }
}

/** The Node a kubelet registers: labels it may set under NodeRestriction, its providerID, registration taints and version. */
export function registrationNode(
  spec: KubeletSpec,
  opts: { registerWithTaints: k8s.V1Taint[]; release: ReleaseInfo },
): k8s.V1Node {
  const labels: Record<string, string> = {
    'kubernetes.io/hostname': spec.nodeName,
    'kubernetes.io/os': 'linux',
    [SIMULATION.hostLabel]: 'local',
  };
  if (spec.zone) labels[LABELS.zone] = spec.zone;
  const taints = new Map<string, k8s.V1Taint>();
  for (const t of [...opts.registerWithTaints, ...spec.taints])
    taints.set(`${t.key}:${t.effect}`, { key: t.key, value: t.value, effect: t.effect });
  // Empty fields are KWOK's to fill; the version and OS image are the release's, as a real kubelet's would be.
  const nodeInfo = {
    architecture: '',
    bootID: '',
    containerRuntimeVersion: '',
    kernelVersion: '',
    kubeProxyVersion: '',
    machineID: '',
    operatingSystem: 'linux',
    systemUUID: '',
  };
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name: spec.nodeName, labels },
    spec: { providerID: spec.providerID, taints: [...taints.values()] },
    status: {
      nodeInfo: { ...nodeInfo, kubeletVersion: opts.release.kubeletVersion ?? '', osImage: opts.release.osImage ?? '' },
    },
  };
}

/**
 * A CSR's name from its key and what it asks for (not the request's bytes: an ECDSA signature differs each
 * time), so a restarted kubelet, or one whose wait ran out, finds the CSR it submitted rather than adding one.
 */
export function csrName(prefix: string, keyPem: string, asked: readonly string[]): string {
  const digest = createHash('sha256').update(keyPem);
  for (const part of asked) digest.update('\0').update(part);
  return `${prefix}${digest
    .digest('base64url')
    .toLowerCase()
    .replace(/[^a-z0-9]/g, '')}`.slice(0, 63);
}

export type CsrOutcome =
  | { state: 'issued'; certPem: string }
  | { state: 'denied' | 'failed'; message: string }
  | { state: 'pending'; approved: boolean };

/** Where a CSR stands: issued, denied or failed (with the decider's reason and message), or still pending. */
export function csrOutcome(csr: k8s.V1CertificateSigningRequest): CsrOutcome {
  const conditions = csr.status?.conditions ?? [];
  const said = (type: string): string | undefined => {
    const c = conditions.find((x) => x.type === type && x.status !== 'False');
    return c ? [c.reason, c.message].filter(Boolean).join(': ') || type : undefined;
  };
  const denied = said('Denied');
  if (denied !== undefined) return { state: 'denied', message: denied };
  const failed = said('Failed');
  if (failed !== undefined) return { state: 'failed', message: failed };
  if (csr.status?.certificate)
    return { state: 'issued', certPem: Buffer.from(csr.status.certificate, 'base64').toString() };
  return { state: 'pending', approved: said('Approved') !== undefined };
}

/** The apiserver's own message of a refused request, or the error's. */
export function apiMessage(err: unknown): string {
  const body = (err as { body?: unknown }).body;
  if (typeof body === 'string') {
    try {
      const message = (JSON.parse(body) as { message?: unknown }).message;
      if (typeof message === 'string' && message !== '') return message;
    } catch {
      if (body.trim() !== '') return body.trim();
    }
  }
  return (err as Error).message ?? String(err);
}

/** The condition an error of the join leaves, and whether the kubelet gives up (terminal) or retries. */
export function joinFailure(err: unknown): { reason: string; message: string; terminal: boolean } {
  if (err instanceof TerminalError) return { reason: err.reason, message: err.message, terminal: true };
  if (err instanceof RetryableJoinError) return { reason: err.reason, message: err.message, terminal: false };
  return { reason: KUBELET_REASONS.apiserverUnreachable, message: apiMessage(err), terminal: false };
}

/** Refusals of the bootstrap token's requests, said as a kubelet operator would want to read them. */
export function bootstrapRefusal(err: unknown): unknown {
  const code = statusCode(err);
  if (code === 401)
    return new RetryableJoinError(
      'the guest apiserver refused the bootstrap token (401 Unauthorized): it expired, was deleted or never existed',
      KUBELET_REASONS.bootstrapTokenRejected,
      { cause: err },
    );
  if (code === 403)
    return new RetryableJoinError(
      `the bootstrap token may not submit CSRs: ${apiMessage(err)}`,
      KUBELET_REASONS.bootstrapForbidden,
      { cause: err },
    );
  return err;
}

// ---- the kubelet ----

interface Credentials {
  material: BootstrapMaterial;
  certPem: string;
  keyPem: string;
}

interface CsrRequest {
  client: k8s.KubeConfig;
  signerName: string;
  usages: string[];
  keyPath: string;
  /** Prefix of the CSR's name. */
  prefix: string;
  dnsNames?: string[];
  ipAddresses?: string[];
  condition: string;
}

const combined = (c: { certPem: string; keyPem: string }): string => `${c.certPem.trimEnd()}\n${c.keyPem}`;

function splitPem(pem: string): { certPem: string; keyPem: string } | undefined {
  const cert = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/.exec(pem)?.[0];
  const key = /-----BEGIN (?:EC |)PRIVATE KEY-----[\s\S]+?-----END (?:EC |)PRIVATE KEY-----/.exec(pem)?.[0];
  return cert && key ? { certPem: `${cert}\n`, keyPem: `${key}\n` } : undefined;
}

function kubeConfigOf(material: BootstrapMaterial, user: k8s.User): k8s.KubeConfig {
  const kc = new k8s.KubeConfig();
  kc.loadFromOptions({
    clusters: [
      {
        name: 'guest',
        server: material.server,
        caData: Buffer.from(material.caPem).toString('base64'),
        skipTLSVerify: false,
      },
    ],
    users: [user],
    contexts: [{ name: 'kubelet', cluster: 'guest', user: user.name }],
    currentContext: 'kubelet',
  });
  return kc;
}

const b64 = (s: string): string => Buffer.from(s).toString('base64');

/** The kubeconfig a kubelet keeps once bootstrapped: host paths, as the kubelet on the host would read them. */
function kubeletKubeconfig(material: BootstrapMaterial): string {
  return [
    'apiVersion: v1',
    'kind: Config',
    `clusters:\n- name: default-cluster\n  cluster:\n    server: ${material.server}\n    certificate-authority-data: ${b64(material.caPem)}`,
    `users:\n- name: default-auth\n  user:\n    client-certificate: ${HOST_PATHS.kubeletClientCert}\n    client-key: ${HOST_PATHS.kubeletClientCert}`,
    'contexts:\n- name: default-context\n  context:\n    cluster: default-cluster\n    user: default-auth',
    'current-context: default-context',
    '',
  ].join('\n');
}

export class Kubelet {
  readonly #spec: KubeletSpec;
  readonly #deps: KubeletDeps;
  readonly #timing: KubeletTiming;
  readonly #fs: HostFs;
  /** Last condition recorded per type, so an unchanged one is not written again. */
  readonly #reported = new Map<string, string>();
  /** The host status last reported (HostStatus as JSON), so an unchanged one is not written again. */
  #reportedStatus: string | undefined;
  #configProblem: string | undefined;

  constructor(spec: KubeletSpec, deps: KubeletDeps) {
    this.#spec = spec;
    this.#deps = deps;
    this.#timing = { ...KUBELET_TIMING, ...deps.timing };
    this.#fs = new HostFs(spec.root);
  }

  get #identity(): string {
    return `system:node:${this.#spec.nodeName}`;
  }

  /** Joins (retrying what may still succeed), then keeps the Node's version current until aborted. */
  async run(): Promise<void> {
    const credentials = await this.#retrying(KUBELET_CONDITIONS.joined, () => this.#join());
    if (!credentials) return;
    await Promise.all([
      this.#retrying(KUBELET_CONDITIONS.servingCertificate, () => this.#servingCertificate(credentials)),
      this.#syncStatus(credentials),
    ]);
  }

  async #retrying<T>(condition: string, attempt: () => Promise<T>): Promise<T | undefined> {
    let delay = this.#timing.retryMs;
    while (!this.#deps.signal.aborted) {
      try {
        return await attempt();
      } catch (err) {
        if (this.#deps.signal.aborted) return undefined;
        const failure = joinFailure(err);
        await this.#report({ type: condition, status: 'False', reason: failure.reason, message: failure.message });
        this.#deps.log.warn(
          { err, condition, reason: failure.reason, retryInMs: failure.terminal ? undefined : delay },
          failure.terminal ? 'Kubelet gave up' : 'Kubelet will retry',
        );
        if (failure.terminal) return undefined;
        await this.#pause(delay);
        delay = Math.min(delay * 2, this.#timing.maxRetryMs);
      }
    }
    return undefined;
  }

  async #join(): Promise<Credentials> {
    const material = await this.#joinMaterial();
    const credentials = (await this.#existingCredentials(material)) ?? (await this.#bootstrap(material));
    await this.#register(credentials);
    await this.#report({
      type: KUBELET_CONDITIONS.joined,
      status: 'True',
      reason: KUBELET_REASONS.joined,
      message: `Node ${this.#spec.nodeName} registered with its own client certificate (${this.#identity})`,
    });
    this.#deps.log.info({ node: this.#spec.nodeName }, 'Kubelet joined the guest cluster');
    return credentials;
  }

  async #joinMaterial(): Promise<BootstrapMaterial> {
    const [kubeconfig, ca, config] = await Promise.all(
      [HOST_PATHS.bootstrapKubeconfig, HOST_PATHS.guestCa, HOST_PATHS.kubeletConfig].map((p) => this.#fs.read(p)),
    );
    const missing = [
      kubeconfig === undefined ? HOST_PATHS.bootstrapKubeconfig : '',
      config === undefined ? HOST_PATHS.kubeletConfig : '',
    ].filter(Boolean);
    if (missing.length > 0)
      throw new TerminalError(
        `the host's payload has no join material: ${missing.join(' and ')} missing`,
        KUBELET_REASONS.noJoinMaterial,
      );
    try {
      parseKubeletConfig(config ?? '');
      return parseBootstrapKubeconfig(kubeconfig ?? '', ca);
    } catch (err) {
      throw new TerminalError((err as Error).message, KUBELET_REASONS.noJoinMaterial, { cause: err });
    }
  }

  /** The client certificate of an earlier run, while it is the CA's, this node's and valid for a while yet. */
  async #existingCredentials(material: BootstrapMaterial): Promise<Credentials | undefined> {
    const pair = splitPem((await this.#fs.read(HOST_PATHS.kubeletClientCert)) ?? '');
    if (!pair) return undefined;
    try {
      const info = await verifyCertificate(pair.certPem, material.caPem, new Date(this.#deps.clock.now() + 60_000));
      if (info.commonName === this.#identity) return { material, ...pair };
      this.#deps.log.warn(
        { commonName: info.commonName },
        'Client certificate names another node; bootstrapping again',
      );
    } catch (err) {
      this.#deps.log.warn({ err }, 'Client certificate no longer usable; bootstrapping again');
    }
    return undefined;
  }

  async #bootstrap(material: BootstrapMaterial): Promise<Credentials> {
    const client = kubeConfigOf(material, { name: 'kubelet-bootstrap', token: material.token });
    const issued = await this.#certificate({
      client,
      signerName: KUBELET_CLIENT_SIGNER,
      usages: CLIENT_USAGES,
      keyPath: HOST_PATHS.kubeletClientKeyPending,
      prefix: 'node-csr-',
      condition: KUBELET_CONDITIONS.joined,
    }).catch((err: unknown) => {
      throw bootstrapRefusal(err);
    });
    await this.#fs.write(HOST_PATHS.kubeletClientCert, combined(issued), 0o600);
    await this.#fs.write(HOST_PATHS.kubeletKubeconfig, kubeletKubeconfig(material), 0o600);
    await this.#fs.remove(HOST_PATHS.kubeletClientKeyPending);
    return { material, ...issued };
  }

  /** Submits (or finds again) a CSR for this node and waits for its certificate. */
  async #certificate(req: CsrRequest): Promise<{ certPem: string; keyPem: string }> {
    const subject = {
      commonName: this.#identity,
      organizations: ['system:nodes'],
      dnsNames: req.dnsNames,
      ipAddresses: req.ipAddresses,
    };
    const pending = await this.#fs.read(req.keyPath);
    const request = await createCertificateRequest({ ...subject, keyPem: pending }).catch(() =>
      createCertificateRequest(subject),
    );
    if (request.keyPem !== pending) await this.#fs.write(req.keyPath, request.keyPem, 0o600);
    const name = csrName(req.prefix, request.keyPem, [
      req.signerName,
      subject.commonName,
      ...subject.organizations,
      ...(req.dnsNames ?? []),
      ...(req.ipAddresses ?? []),
      ...req.usages,
    ]);
    const certificates = this.#client(req.client, k8s.CertificatesV1Api);
    await certificates
      .createCertificateSigningRequest({
        body: {
          metadata: { name },
          spec: { request: b64(request.csrPem), signerName: req.signerName, usages: req.usages },
        },
      })
      .catch((err: unknown) => {
        if (statusCode(err) !== 409) throw err;
      });
    await this.#report({
      type: req.condition,
      status: 'False',
      reason: KUBELET_REASONS.waitingForApproval,
      message: `CSR ${name} (${req.signerName}) waits for approval`,
    });
    const certPem = await this.#awaitCertificate(certificates, name);
    return { certPem, keyPem: request.keyPem };
  }

  async #awaitCertificate(certificates: k8s.CertificatesV1Api, name: string): Promise<string> {
    const deadline = this.#deps.clock.now() + this.#timing.approvalTimeoutMs;
    while (!this.#deps.signal.aborted && this.#deps.clock.now() < deadline) {
      const outcome = csrOutcome(await certificates.readCertificateSigningRequest({ name }));
      if (outcome.state === 'issued') return outcome.certPem;
      if (outcome.state === 'denied')
        throw new TerminalError(`CSR ${name} was denied: ${outcome.message}`, KUBELET_REASONS.csrDenied);
      if (outcome.state === 'failed')
        throw new TerminalError(`CSR ${name} failed: ${outcome.message}`, KUBELET_REASONS.csrFailed);
      await this.#pause(this.#timing.pollMs);
    }
    throw new RetryableJoinError(
      `CSR ${name} was not approved and signed within ${Math.round(this.#timing.approvalTimeoutMs / 1000)} s; still waiting`,
      KUBELET_REASONS.waitingForApproval,
    );
  }

  async #register(credentials: Credentials): Promise<void> {
    const core = this.#client(this.#nodeClient(credentials), k8s.CoreV1Api);
    const [config, release] = await Promise.all([this.#fs.read(HOST_PATHS.kubeletConfig), this.#release()]);
    const node = registrationNode(this.#spec, {
      registerWithTaints: parseKubeletConfig(config ?? '{"kind":"KubeletConfiguration"}').registerWithTaints,
      release,
    });
    try {
      await core.createNode({ body: node });
    } catch (err) {
      const code = statusCode(err);
      if (code === 403)
        throw new RetryableJoinError(
          `the guest apiserver refused to register Node ${this.#spec.nodeName}: ${apiMessage(err)}`,
          KUBELET_REASONS.registrationRefused,
          { cause: err },
        );
      // Registered before (a restarted kubelet): the Node is kept, and its status brought up to date (#syncStatus).
      if (code !== 409) throw err;
    }
  }

  async #servingCertificate(credentials: Credentials): Promise<void> {
    const existing = splitPem((await this.#fs.read(HOST_PATHS.kubeletServingCert)) ?? '');
    const valid =
      existing &&
      (await verifyCertificate(
        existing.certPem,
        credentials.material.caPem,
        new Date(this.#deps.clock.now() + 60_000),
      ).then(
        () => true,
        () => false,
      ));
    if (!valid) {
      const issued = await this.#certificate({
        client: this.#nodeClient(credentials),
        signerName: KUBELET_SERVING_SIGNER,
        usages: SERVING_USAGES,
        keyPath: HOST_PATHS.kubeletServingKeyPending,
        prefix: 'node-serving-csr-',
        dnsNames: [this.#spec.nodeName],
        ipAddresses: ['127.0.0.1'],
        condition: KUBELET_CONDITIONS.servingCertificate,
      });
      await this.#fs.write(HOST_PATHS.kubeletServingCert, combined(issued), 0o600);
      await this.#fs.remove(HOST_PATHS.kubeletServingKeyPending);
    }
    await this.#report({
      type: KUBELET_CONDITIONS.servingCertificate,
      status: 'True',
      reason: KUBELET_REASONS.issued,
      message: `serving certificate for ${this.#spec.nodeName}, 127.0.0.1`,
    });
  }

  /**
   * Reports the host's status whenever it changes: the release's kubelet version (an in-place upgrade
   * rewrites the file), the boot ID (a simulated reboot writes a new one), and whether the kubelet config is
   * one the kubelet would start with (if not, the Node is not Ready until it is again).
   */
  async #syncStatus(credentials: Credentials): Promise<void> {
    const core = this.#client(this.#nodeClient(credentials), k8s.CoreV1Api);
    while (!this.#deps.signal.aborted) {
      try {
        await this.#reportStatus(core);
      } catch (err) {
        this.#deps.log.warn({ err }, 'Could not report the Node status; retrying');
      }
      await this.#pause(this.#timing.statusSyncMs);
    }
  }

  async #reportStatus(core: k8s.CoreV1Api): Promise<void> {
    const [release, bootId, config, systemctl] = await Promise.all([
      this.#release(),
      this.#fs.read(HOST_PATHS.bootId),
      this.#fs.read(HOST_PATHS.kubeletConfig),
      this.#fs.read(HOST_PATHS.simulatedSystemctl),
    ]);
    const status: HostStatus = {
      release,
      bootId: bootId?.trim() || undefined,
      configProblem: kubeletConfigProblem(config),
    };
    // A unit action of the agent (a restart of kubelet.service among them) makes a new report, as a restart would.
    const key = JSON.stringify([status, systemctl]);
    if (this.#reportedStatus === key) return;
    const name = this.#spec.nodeName;
    const node = await core.readNode({ name });
    const patches = hostStatusPatches(
      status,
      node.metadata?.annotations?.[SIMULATION.hostDown],
      new Date(this.#deps.clock.now()),
    );
    if (patches.metadata)
      await core.patchNode(
        { name, body: { metadata: patches.metadata } },
        k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
      );
    await core.patchNodeStatus(
      { name, body: { status: patches.status } },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.StrategicMergePatch),
    );
    if (status.configProblem !== this.#configProblem) {
      if (status.configProblem)
        this.#deps.log.error(
          { node: name, problem: status.configProblem },
          'Kubelet rejects its config: the Node is not Ready',
        );
      else if (this.#configProblem) this.#deps.log.info({ node: name }, 'Kubelet config valid again');
    }
    this.#configProblem = status.configProblem;
    this.#reportedStatus = key;
  }

  async #release(): Promise<ReleaseInfo> {
    return parseReleaseInfo(await this.#fs.read(HOST_PATHS.releaseInfo));
  }

  #nodeClient(credentials: Credentials): k8s.KubeConfig {
    return kubeConfigOf(credentials.material, {
      name: 'kubelet',
      certData: b64(credentials.certPem),
      keyData: b64(credentials.keyPem),
    });
  }

  /** A client whose requests have a deadline, and end with the kubelet. */
  #client<T>(kc: k8s.KubeConfig, type: new (config: k8s.Configuration) => T): T {
    return makeApiClient(kc, type, this.#timing.requestTimeoutMs, this.#deps.signal);
  }

  async #report(condition: KubeletCondition): Promise<void> {
    const key = `${condition.status}/${condition.reason}/${condition.message}`;
    if (this.#reported.get(condition.type) === key) return;
    try {
      await this.#deps.report(condition);
      this.#reported.set(condition.type, key);
    } catch (err) {
      this.#deps.log.warn({ err, condition: condition.type }, 'Could not record the kubelet condition');
    }
  }

  #pause(ms: number): Promise<void> {
    const { clock, signal } = this.#deps;
    return new Promise((resolve) => {
      const done = (): void => {
        clock.clearTimeout(handle);
        signal.removeEventListener('abort', done);
        resolve();
      };
      const handle = clock.setTimeout(done, ms);
      signal.addEventListener('abort', done, { once: true });
    });
  }
}

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
import * as k8s from '#k8s';
import { HOST_PATHS } from '../../../../api/src/host-paths.js';
import { makeApiClient } from '../../../../support/src/kubeconfig.js';
import { statusCode, TerminalError } from '../../../../support/src/errors.js';
import type { Logger } from '../../../../support/src/logger.js';
import { createCertificateRequest, verifyCertificate } from '../../../../test/bed/src/pki.js';
import type { Clock } from '../../../../support/src/timers.js';
import { HostFs } from '../host-fs.js';
import { b64, combined, kubeConfigOf, kubeletKubeconfig, splitPem, type Credentials } from './credentials.js';
import {
  kubeletConfigProblem,
  parseBootstrapKubeconfig,
  parseKubeletConfig,
  parseReleaseInfo,
  type BootstrapMaterial,
  type ReleaseInfo,
} from './host-files.js';
import {
  apiMessage,
  bootstrapRefusal,
  CLIENT_USAGES,
  csrName,
  csrOutcome,
  joinFailure,
  KUBELET_CLIENT_SIGNER,
  KUBELET_REASONS,
  KUBELET_SERVING_SIGNER,
  RetryableJoinError,
  SERVING_USAGES,
} from './join.js';
import { hostStatusPatches, registrationNode, type HostStatus, type KubeletSpec } from './node-status.js';
import { SIMULATION } from '../../../../test/bed/src/keys.js';

/** Condition types the kubelet reports on its host's LocalMachine. */
const KUBELET_CONDITIONS = {
  /** Whether the host joined the guest cluster as a Node of its own. */
  joined: 'Joined',
  /** Whether the kubelet holds a serving certificate (never holds up Joined). */
  servingCertificate: 'ServingCertificate',
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

export interface KubeletDeps {
  log: Logger;
  clock: Clock;
  signal: AbortSignal;
  timing?: Partial<KubeletTiming>;
  /** Records a condition on the host's LocalMachine. */
  report(condition: KubeletCondition): Promise<void>;
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

/**
 * The real Cluster API core manager (v1.14.2, built from Go modules) against a test-bed management cluster,
 * with its validating/defaulting webhooks registered at a loopback URL (as Cluster API's own envtest does), so
 * what Kindling writes passes the same checks it would in a real management cluster.
 */
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import * as k8s from '#k8s';
import { loadCertificateAuthority } from './pki.js';
import { createApplier } from '../../../support/src/apply.js';
import { parseManifests } from '../../../support/src/manifests.js';
import { ManagedProcess } from './process.js';
import { keptPort } from './ports.js';
import { capiCrdDir, testbedBinary } from './testbed.js';
import type { Cluster } from './cluster.js';

/**
 * Feature gates the manager runs with unless told otherwise: the Runtime SDK and in-place updates (so
 * Kindling's Runtime Extension can be registered and called), and taint propagation (without it the
 * webhooks refuse any taint in a Machine template).
 */
const CAPI_FEATURE_GATES: readonly string[] = ['RuntimeSDK', 'InPlaceUpdates', 'MachineTaintPropagation'];

export interface CapiManager {
  readonly process: ManagedProcess;
  stop(): Promise<void>;
}

interface WebhookEntry {
  name: string;
  clientConfig: { service?: unknown; url?: string; caBundle?: string };
}

/** Cluster API's webhook manifests with each service reference rewritten to https://127.0.0.1:<port><path>. */
async function loopbackWebhooks(port: number, caPem: string): Promise<k8s.KubernetesObject[]> {
  const text = await readFile(join(capiCrdDir(), '..', 'cluster-api-webhooks.yaml'), 'utf8');
  return parseManifests(text, 'cluster-api-webhooks.yaml').map((config) => {
    const webhooks = (config as unknown as { webhooks: WebhookEntry[] }).webhooks.map((w) => {
      const path = (w.clientConfig.service as { path?: string } | undefined)?.path ?? '/';
      return {
        ...w,
        clientConfig: { url: `https://127.0.0.1:${port}${path}`, caBundle: Buffer.from(caPem).toString('base64') },
      };
    });
    return { ...config, metadata: { name: `capi-${config.metadata?.name ?? ''}` }, webhooks } as k8s.KubernetesObject;
  });
}

async function waitHealthy(url: string, proc: ManagedProcess, timeoutMs = 90_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!proc.alive) throw new Error(`capi-manager exited while starting:\n${proc.tail()}`);
    const ok = await fetch(url).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) return;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`capi-manager not ready at ${url} after ${timeoutMs} ms:\n${proc.tail()}`);
}

/** Starts the manager, waits until it is ready, then registers its webhooks (their failure policy is Fail). */
export async function startCapiManager(
  mgmt: Cluster,
  opts: { featureGates?: readonly string[] } = {},
): Promise<CapiManager> {
  const gates = opts.featureGates ?? CAPI_FEATURE_GATES;
  const certDir = join(mgmt.dir, 'capi-webhook');
  await mkdir(certDir, { recursive: true });
  const ca = await loadCertificateAuthority(mgmt.ca);
  const serving = await ca.issue({
    commonName: 'capi-webhook',
    ipAddresses: ['127.0.0.1'],
    dnsNames: ['localhost'],
    usage: 'server',
  });
  await writeFile(join(certDir, 'tls.crt'), serving.certPem);
  await writeFile(join(certDir, 'tls.key'), serving.keyPem, { mode: 0o600 });
  // Kept, so that a restarted manager does not draw a port another component of the environment keeps.
  const webhookPort = await keptPort(join(certDir, 'webhook-port'), { movable: true });
  const healthPort = await keptPort(join(certDir, 'health-port'), { movable: true });
  const proc = new ManagedProcess({
    name: 'capi-manager',
    command: testbedBinary('capi-manager'),
    args: [
      `--kubeconfig=${mgmt.kubeconfigPath}`,
      `--webhook-cert-dir=${certDir}`,
      `--webhook-port=${webhookPort}`,
      `--health-addr=127.0.0.1:${healthPort}`,
      '--diagnostics-address=0',
      '--leader-elect=false',
      ...(gates.length > 0 ? [`--feature-gates=${gates.map((g) => `${g}=true`).join(',')}`] : []),
      '--v=1',
    ],
    logFile: join(mgmt.dir, 'capi-manager.log'),
  });
  try {
    await waitHealthy(`http://127.0.0.1:${healthPort}/readyz`, proc);
    const applier = createApplier(mgmt.kubeConfig, 'kindling-testbed');
    for (const config of await loopbackWebhooks(webhookPort, mgmt.ca.certPem)) await applier.apply(config);
  } catch (err) {
    await proc.stop();
    throw err;
  }
  return { process: proc, stop: () => proc.stop() };
}

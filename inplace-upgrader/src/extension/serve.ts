/** The Runtime Extension in `kindling inplace-upgrader`: its Machine and guest caches, and its HTTPS port. */
import { Counter } from 'prom-client';
import type { ComponentContext } from '../../../support/src/component.js';
import type { Namespaces } from '../../../support/src/config.js';
import { startHttpsServer } from '../../../support/src/https.js';
import type { ReadinessCheck } from '../../../support/src/ops-server.js';
import type { PayloadSource } from '../payload.js';
import { createApp, payloadSummaries } from './app.js';
import { BlockersThread } from './blockers.js';
import { MachineUpdater } from './update-machine.js';

/** The upgrader flags the extension reads (a structural slice of the upgrader's config, which imports this module lazily). */
export interface ExtensionFlags {
  agentImage: string;
  extensionAddress: string;
  extensionTlsCertFile: string;
  extensionTlsKeyFile: string;
  extensionRetryAfter: number;
  maxConfigBytes: number;
}

export async function startExtension(
  config: ExtensionFlags,
  ctx: ComponentContext & { namespaces: Namespaces },
  payloads: PayloadSource,
): Promise<ReadinessCheck[]> {
  const log = ctx.log.child({ part: 'extension' });
  const { kubeConfig, namespaces } = ctx;
  const updater = new MachineUpdater({ kubeConfig, namespaces, log, payloads, agentImage: config.agentImage });
  await updater.start();
  ctx.shutdown.add('extension caches', () => updater.stop());
  const requests = new Counter({
    name: 'kindling_extension_hook_requests_total',
    help: 'Runtime Extension hook calls by hook and answer status.',
    labelNames: ['hook', 'status'],
    registers: [ctx.registry],
  });
  const inspector = new BlockersThread(config.maxConfigBytes);
  ctx.shutdown.add('payload inspection thread', () => inspector.stop());
  const app = createApp({
    log,
    payloads: payloadSummaries(payloads, (payload) => inspector.blockers(payload)),
    machines: updater,
    cache: updater,
    retryAfterSeconds: Math.round(config.extensionRetryAfter / 1000),
    metrics: { request: (hook, status) => requests.inc({ hook, status }) },
  });
  const https = await startHttpsServer({
    address: config.extensionAddress,
    certFile: config.extensionTlsCertFile,
    keyFile: config.extensionTlsKeyFile,
    app,
    log,
  });
  ctx.shutdown.add('extension https server', () => https.close());
  log.info({ extensionPort: https.port }, 'Serving the in-place update hooks');
  return [{ name: 'extension-machines-synced', check: () => updater.synced }];
}

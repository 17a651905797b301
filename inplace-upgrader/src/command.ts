/**
 * `kindling inplace-upgrader`: rolls InPlace MachineSets' nodes to their target config, one replica leading;
 * with --extension-address, also serves Cluster API's in-place update hooks (a Runtime Extension) on every
 * replica, so the Service in front of them always has one ready.
 */
import { readFile } from 'node:fs/promises';
import { defineCommand, type Command } from '../../support/src/command.js';
import { ConfigError, flagName, tenantNamespaces, type ConfigOf } from '../../support/src/config.js';
import { COMPONENT_FLAGS, runComponent, type ComponentContext } from '../../support/src/component.js';
import { heapFlags } from '../../support/src/young-generation.js';
import type { ReadinessCheck } from '../../support/src/ops-server.js';
import { CachedPayloadSource, IgnitionServerPayloadSource, type PayloadSource } from './payload.js';
import { InPlaceUpgrader } from './upgrader.js';
import { DEFAULT_MAX_CONFIG_BYTES } from '../../api/src/limits.js';

export const FLAGS = {
  ...COMPONENT_FLAGS,
  ...heapFlags('inplace-upgrader'),
  ignitionUrl: {
    type: 'string',
    default: '',
    help: 'Base URL of the ignition server (required), e.g. https://ignition.kindling-system.svc',
  },
  ignitionCaFile: {
    type: 'string',
    default: '',
    help: "PEM CA bundle of the ignition server's certificate (empty: system CAs)",
  },
  agentImage: { type: 'string', default: 'ghcr.io/kindling/kindling:latest', help: 'Image of the agent Pods' },
  workers: { type: 'int', default: 4, help: 'MachineSets reconciled at once' },
  resync: { type: 'duration', default: 30_000, help: 'Resync of a MachineSet in rollout, even without events' },
  extensionAddress: {
    type: 'string',
    default: '',
    help: 'HTTPS address of the Cluster API Runtime Extension (in-place update hooks), e.g. 0.0.0.0:9443; empty: not served',
  },
  extensionTlsCertFile: {
    type: 'string',
    default: '',
    help: "The extension's serving certificate (PEM), reloaded when it changes; its CA goes into the ExtensionConfig's caBundle",
  },
  extensionTlsKeyFile: {
    type: 'string',
    default: '',
    help: "The extension's serving key (PEM), reloaded when it changes",
  },
  // 1 s: Cluster API calls again only when this has passed (a node's Done does not wake it), so each Machine
  // waits up to this long after its node is done before the next is picked; an answer is a cache read.
  extensionRetryAfter: {
    type: 'duration',
    default: 1_000,
    help: 'How soon Cluster API asks again about a Machine whose update is in progress (whole seconds)',
  },
  maxConfigBytes: {
    type: 'int',
    default: DEFAULT_MAX_CONFIG_BYTES,
    help: "Bytes a payload's files may take in all, decoded and inflated, for the in-place decision; past it the hooks answer Failure (nothing is rolled or applied). Keep it equal to the ignition server's",
  },
} as const;

export type UpgraderConfig = ConfigOf<typeof FLAGS>;

function check(config: UpgraderConfig): void {
  if (config.ignitionUrl === '') throw new ConfigError('--ignition-url is required');
  if (config.maxConfigBytes < 1) throw new ConfigError('--max-config-bytes must be at least 1');
  if (config.extensionAddress === '') return;
  for (const key of ['extensionTlsCertFile', 'extensionTlsKeyFile'] as const) {
    if (config[key] === '') throw new ConfigError(`--${flagName(key)} is required with --extension-address`);
  }
  if (config.extensionRetryAfter < 1000) throw new ConfigError('--extension-retry-after must be at least 1s');
}

export const inplaceUpgraderCommand: Command = defineCommand({
  name: 'inplace-upgrader',
  flags: FLAGS,
  async run(config) {
    check(config);
    const namespaces = tenantNamespaces(config.namespaces);
    const caPem = config.ignitionCaFile === '' ? undefined : await readFile(config.ignitionCaFile, 'utf8');
    let payloads: PayloadSource | undefined;
    const payloadsOf = (ctx: ComponentContext): PayloadSource =>
      (payloads ??= new CachedPayloadSource(
        new IgnitionServerPayloadSource({ kubeConfig: ctx.kubeConfig, url: config.ignitionUrl, caPem }),
      ));
    await runComponent({
      name: 'kindling-inplace-upgrader',
      config,
      // The extension's modules (express among them) load only when it is served: the upgrader alone starts as fast as before.
      start: async (ctx): Promise<ReadinessCheck[]> =>
        config.extensionAddress === ''
          ? []
          : (await import('./extension/serve.js')).startExtension(config, { ...ctx, namespaces }, payloadsOf(ctx)),
      async lead(ctx) {
        const upgrader = new InPlaceUpgrader({
          kubeConfig: ctx.kubeConfig,
          namespaces,
          log: ctx.log,
          payloads: payloadsOf(ctx),
          agentImage: config.agentImage,
          registry: ctx.registry,
          queueMetrics: ctx.queueMetrics,
          workers: config.workers,
          resyncMs: config.resync,
        });
        await upgrader.start();
        return () => upgrader.stop();
      },
    });
    return 0;
  },
});

/** `kindling inplace-upgrader`: rolls InPlace MachineSets' nodes to their target config, one replica leading. */
import { readFile } from 'node:fs/promises';
import { defineCommand, type Command } from '../../cli/src/command.js';
import { ConfigError } from '../../support/src/config.js';
import { COMPONENT_FLAGS, runComponent } from '../../support/src/component.js';
import { CachedPayloadSource, IgnitionServerPayloadSource } from './payload.js';
import { InPlaceUpgrader } from './upgrader.js';

export const inplaceUpgraderCommand: Command = defineCommand({
  name: 'inplace-upgrader',
  summary: "Update InPlace MachineSets' nodes in place, never more than maxUnavailable at once.",
  flags: {
    ...COMPONENT_FLAGS,
    ignitionUrl: { type: 'string', default: '', help: 'Base URL of the ignition server (required), e.g. https://ignition.kindling-system.svc' },
    ignitionCaFile: { type: 'string', default: '', help: "PEM CA bundle of the ignition server's certificate (empty: system CAs)" },
    agentImage: { type: 'string', default: 'ghcr.io/kindling/kindling:latest', help: 'Image of the agent Pods' },
    workers: { type: 'int', default: 4, help: 'MachineSets reconciled at once' },
    resync: { type: 'duration', default: 30_000, help: 'Resync of a MachineSet in rollout, even without events' },
  },
  async run(config) {
    if (config.ignitionUrl === '') throw new ConfigError('--ignition-url is required');
    const caPem = config.ignitionCaFile === '' ? undefined : await readFile(config.ignitionCaFile, 'utf8');
    await runComponent({
      name: 'kindling-inplace-upgrader',
      config,
      start: () => Promise.resolve([]),
      async lead(ctx) {
        const payloads = new CachedPayloadSource(new IgnitionServerPayloadSource({ kubeConfig: ctx.kubeConfig, url: config.ignitionUrl, caPem }));
        const upgrader = new InPlaceUpgrader({
          kubeConfig: ctx.kubeConfig,
          log: ctx.log,
          payloads,
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

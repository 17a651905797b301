/** `kindling drainer`: the central drainer, one replica leading. */
import { defineCommand, type Command } from '../../support/src/command.js';
import { COMPONENT_FLAGS, runComponent } from '../../support/src/component.js';
import { heapFlags } from '../../support/src/young-generation.js';
import { tenantNamespaces } from '../../support/src/config.js';
import { Drainer } from './drainer.js';

export const drainerCommand: Command = defineCommand({
  name: 'drainer',
  flags: {
    ...COMPONENT_FLAGS,
    ...heapFlags('drainer'),
    defaultDrainTimeout: {
      type: 'duration',
      default: 0,
      help: "Drain timeout when the node's MachineSet sets none (0: wait forever)",
    },
    workers: { type: 'int', default: 16, help: 'Nodes reconciled at once' },
    evictionConcurrency: { type: 'int', default: 16, help: 'Evictions in flight at once per drain' },
  },
  async run(config) {
    const namespaces = tenantNamespaces(config.namespaces);
    await runComponent({
      name: 'kindling-drainer',
      config,
      start: () => Promise.resolve([]),
      async lead(ctx) {
        const drainer = new Drainer({
          kubeConfig: ctx.kubeConfig,
          namespaces,
          log: ctx.log,
          registry: ctx.registry,
          queueMetrics: ctx.queueMetrics,
          defaultDrainTimeoutMs: config.defaultDrainTimeout,
          workers: config.workers,
          evictionConcurrency: config.evictionConcurrency,
        });
        await drainer.start();
        return () => drainer.stop();
      },
    });
    return 0;
  },
});

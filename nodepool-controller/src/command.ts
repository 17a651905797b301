/**
 * `kindling nodepool-controller`: the NodePool controller and the guest clusters' kubelet CSR approver as a
 * long-running component; both act only while leading.
 */
import { readFile } from 'node:fs/promises';
import { defineCommand, type Command } from '../../support/src/command.js';
import { COMPONENT_FLAGS, runComponent } from '../../support/src/component.js';
import { heapFlags } from '../../support/src/young-generation.js';
import { tenantNamespaces } from '../../support/src/config.js';
import { createNodePoolController, type NodePoolController } from './controller.js';

export const NODEPOOL_CONTROLLER_FLAGS = {
  ...COMPONENT_FLAGS,
  ...heapFlags('nodepool-controller'),
  ignitionEndpoint: {
    type: 'string',
    default: '',
    help: 'host[:port] of the ignition server that hosts fetch https://<endpoint>/ignition from (required)',
  },
  ignitionCaFile: {
    type: 'string',
    default: '',
    help: "PEM file of the CA that signs the ignition server's serving certificate, put in every stub (required)",
  },
  tokenGrace: {
    type: 'duration',
    default: 7_200_000,
    help: "How long an old token stays valid after the pool's config hash moved on",
  },
  maxSkewMinors: { type: 'int', default: 3, help: 'How many minor versions the nodes may be behind the control plane' },
  joinTimeout: {
    type: 'duration',
    default: 600_000,
    help: "How long a booted host may take to register its Node before the pool's AllNodesJoined condition says so",
  },
  workers: {
    type: 'int',
    default: 4,
    help: 'Pools reconciled at once; one namespace holds all but one of them at most, so another tenant always has one',
  },
  csrGrace: {
    type: 'duration',
    default: 120_000,
    help: "How long a kubelet's CSR waits for its Machine's addresses (or its Node) to show before it is denied",
  },
  maxPendingCsrsPerGuest: {
    type: 'int',
    default: 100,
    help: "Undecided kubelet CSRs of the last hour a guest cluster may have beyond one per live Machine; beyond it the guest's CSRs are decided in batches of its oldest",
  },
} as const;

export const nodePoolControllerCommand: Command = defineCommand({
  name: 'nodepool-controller',
  flags: NODEPOOL_CONTROLLER_FLAGS,
  async run(cfg, io) {
    if (cfg.ignitionEndpoint === '' || cfg.ignitionCaFile === '') {
      io.err('nodepool-controller: --ignition-endpoint and --ignition-ca-file are required\n');
      return 2;
    }
    if (cfg.maxSkewMinors < 0 || cfg.workers < 1 || cfg.maxPendingCsrsPerGuest < 1) {
      io.err('nodepool-controller: --max-skew-minors must be ≥ 0, --workers and --max-pending-csrs-per-guest ≥ 1\n');
      return 2;
    }
    const namespaces = tenantNamespaces(cfg.namespaces);
    const caPem = await readFile(cfg.ignitionCaFile, 'utf8');
    let controller: NodePoolController | undefined;
    await runComponent({
      name: 'kindling-nodepool-controller',
      config: cfg,
      // A replica that is not leading has nothing to sync; the leader is ready once its caches are.
      start: () => Promise.resolve([{ name: 'caches', check: () => controller === undefined || controller.synced }]),
      async lead(ctx) {
        const c = createNodePoolController({
          kubeConfig: ctx.kubeConfig,
          namespaces,
          log: ctx.log,
          config: {
            ignition: { endpoint: cfg.ignitionEndpoint, caPem },
            tokenGraceMs: cfg.tokenGrace,
            maxSkewMinors: cfg.maxSkewMinors,
            joinTimeoutMs: cfg.joinTimeout,
          },
          workers: cfg.workers,
          csrGraceMs: cfg.csrGrace,
          maxPendingCsrsPerGuest: cfg.maxPendingCsrsPerGuest,
          queueMetrics: ctx.queueMetrics,
          registry: ctx.registry,
        });
        controller = c;
        await c.start();
        return () => c.stop();
      },
    });
    return 0;
  },
});

/** `kindling agent`: the node agent, run in the agent Pod the upgrader pins to a node. */
import { resolve } from 'node:path';
import { defineCommand, type Command } from '../../support/src/command.js';
import { ConfigError } from '../../support/src/config.js';
import { loadKubeConfig } from '../../support/src/component.js';
import { createLogger } from '../../support/src/logger.js';
import { GUEST_NAMESPACE, HOST_ROOT_MOUNT } from '../../api/src/node-agent.js';
import { Agent } from './agent.js';
import { Host } from './host.js';
import { SimulatedReboot, SystemdReboot, type RebootAction } from './reboot.js';

export const agentCommand: Command = defineCommand({
  name: 'agent',
  flags: {
    node: { type: 'string', default: '', help: 'Name of this Node (required)' },
    root: { type: 'string', default: HOST_ROOT_MOUNT, help: "Where the host's root filesystem is mounted" },
    namespace: { type: 'string', default: GUEST_NAMESPACE, help: 'Guest namespace of the payload Secret' },
    kubeconfig: {
      type: 'string',
      default: '',
      help: 'Kubeconfig of the guest cluster; empty: $KUBECONFIG, ~/.kube/config, or in-cluster',
    },
    reboot: {
      type: 'string',
      default: 'systemd',
      help: "How to reboot: systemd (the host's), or simulated (new boot ID, exit; for tests)",
    },
    poll: { type: 'duration', default: 5_000, help: 'Longest wait between steps when no Node event arrives' },
    logLevel: { type: 'string', default: 'info', help: 'Log level: trace, debug, info, warn, error' },
  },
  async run(config) {
    if (config.node === '') throw new ConfigError('--node is required');
    if (config.reboot !== 'systemd' && config.reboot !== 'simulated')
      throw new ConfigError(`--reboot must be systemd or simulated, not "${config.reboot}"`);
    const log = createLogger({ name: 'kindling-agent', level: config.logLevel }).child({ node: config.node });
    const host = new Host(resolve(config.root));
    const reboot: RebootAction =
      config.reboot === 'simulated' ? new SimulatedReboot(host, () => process.exit(0)) : new SystemdReboot();
    const agent = new Agent({
      kubeConfig: loadKubeConfig(config.kubeconfig),
      node: config.node,
      host,
      namespace: config.namespace,
      reboot,
      log,
      pollMs: config.poll,
    });
    const stop = new AbortController();
    for (const signal of ['SIGTERM', 'SIGINT'] as const) process.once(signal, () => stop.abort());
    await agent.run(stop.signal);
    return 0;
  },
});

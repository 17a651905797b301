/**
 * Every `kindling` subcommand. Each deployable adds its own here (nodepool-controller, ignition-server,
 * inplace-upgrader, drainer, agent) so one image runs them all.
 */
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { CRD_DIR } from '../../api/src/crd.js';
import { defineCommand, lazyCommand, type Command } from '../../support/src/command.js';
import { VERSION } from './version.js';

const version = defineCommand({
  name: 'version',
  summary: 'Print the Kindling version.',
  flags: {},
  run(_cfg, io) {
    io.out(`kindling ${VERSION}\n`);
    return Promise.resolve(0);
  },
});

const crds = defineCommand({
  name: 'crds',
  summary: "Print Kindling's CustomResourceDefinitions (kindling crds | kubectl apply --server-side -f -).",
  flags: {},
  async run(_cfg, io) {
    const files = (await readdir(CRD_DIR)).filter((f) => f.endsWith('.yaml')).sort();
    const docs = await Promise.all(files.map((f) => readFile(join(CRD_DIR, f), 'utf8')));
    io.out(docs.map((d) => (d.startsWith('---') ? d : `---\n${d}`)).join(''));
    return 0;
  },
});

// Each deployable's module is imported when its command runs (support/src/command.ts, lazyCommand); the name
// and summary here are checked against the module's own (commands.test.ts).
export const COMMANDS: readonly Command[] = [
  version,
  crds,
  lazyCommand(
    'plan',
    'Show what a NodePool change would do (policies, config hash, in place or replace, node batches); changes nothing. Exit 3 when a policy blocks it.',
    async () => (await import('./plan.js')).planCommand,
  ),
  lazyCommand(
    'status',
    'Show NodePools: desired/current/ready, version, config hash, conditions that are not fine, rollout progress per node.',
    async () => (await import('./status.js')).statusCommand,
  ),
  lazyCommand(
    'nodepool-controller',
    'Run the NodePool controller (NodePools become token/user-data Secrets and Cluster API objects) and the kubelet CSR approver.',
    async () => (await import('../../nodepool-controller/src/command.js')).nodePoolControllerCommand,
  ),
  lazyCommand(
    'drainer',
    'Cordon, drain (Eviction API) and uncordon guest Nodes on request (desiredDrain/lastAppliedDrain).',
    async () => (await import('../../drainer/src/command.js')).drainerCommand,
  ),
  lazyCommand(
    'inplace-upgrader',
    "Update InPlace MachineSets' nodes in place, never more than maxUnavailable at once; optionally serve Cluster API's in-place update hooks.",
    async () => (await import('../../inplace-upgrader/src/command.js')).inplaceUpgraderCommand,
  ),
  lazyCommand(
    'agent',
    "Apply this node's payload Secret to the host root in place (machine-config-daemon protocol).",
    async () => (await import('../../node-agent/src/command.js')).agentCommand,
  ),
  lazyCommand(
    'ignition-server',
    'Serve Ignition payloads over HTTPS to booting hosts and manage their tokens.',
    async () => (await import('../../ignition-server/src/command.js')).ignitionServerCommand,
  ),
  lazyCommand(
    'release',
    'Build a release image from a folder: release build <folder> --output <layout dir|file.tar> [--push <registry ref>].',
    async () => (await import('../../ignition-server/src/command.js')).releaseCommand,
  ),
];

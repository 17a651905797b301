/**
 * Every `kindling` subcommand. Each deployable adds its own here (nodepool-controller, ignition-server,
 * inplace-upgrader, drainer, agent) so one image runs them all.
 */
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { CRD_DIR } from '../../api/src/crd.js';
import { defineCommand, type Command } from '../../support/src/command.js';
import { VERSION } from './version.js';
import { planCommand } from './plan.js';
import { statusCommand } from './status.js';
import { nodePoolControllerCommand } from '../../nodepool-controller/src/command.js';
import { ignitionServerCommand, releaseCommand } from '../../ignition-server/src/command.js';
import { drainerCommand } from '../../drainer/src/command.js';
import { inplaceUpgraderCommand } from '../../inplace-upgrader/src/command.js';
import { agentCommand } from '../../inplace-upgrader/src/agent/command.js';

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

export const COMMANDS: readonly Command[] = [version, crds, planCommand, statusCommand, nodePoolControllerCommand, drainerCommand, inplaceUpgraderCommand, agentCommand, ignitionServerCommand, releaseCommand];

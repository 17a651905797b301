/**
 * The local providers as their own process (the local environment runs one): node dist/local/src/providers/main.js
 * --kubeconfig <management kubeconfig> --state-dir <folder holding the hosts>.
 */
import { parseConfig } from '../../../support/src/config.js';
import { createLogger } from '../../../support/src/logger.js';
import { createShutdown } from '../../../support/src/shutdown.js';
import { loadKubeConfig } from '../../../support/src/component.js';
import { startProviders } from './run.js';

const config = parseConfig(
  {
    kubeconfig: { type: 'string', default: '', help: 'Kubeconfig of the management cluster' },
    stateDir: { type: 'string', default: '.state/local', help: 'Folder holding the hosts (hosts/<namespace>/<name>)' },
    logLevel: { type: 'string', default: 'info', help: 'Log level' },
  },
  process.argv.slice(2),
  process.env,
);
const log = createLogger({ name: 'local-providers', level: config.logLevel });
const shutdown = createShutdown(log);
const providers = await startProviders({
  kubeConfig: loadKubeConfig(config.kubeconfig),
  stateDir: config.stateDir,
  log,
});
shutdown.add('providers', () => providers.stop());
log.info('Local providers started');
await shutdown.begun;

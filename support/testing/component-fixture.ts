/**
 * A component whose leader work fails to start, run as its own process by component.cluster.test.ts (a component exits
 * the process on purpose, so it cannot run inside the test runner). Not used by any command.
 */
import { COMPONENT_FLAGS, runComponent } from '../src/component.js';
import { parseConfig } from '../src/config.js';

const config = parseConfig(COMPONENT_FLAGS, process.argv.slice(2), process.env);
await runComponent({
  name: 'kindling-fixture',
  config,
  start: () => Promise.resolve([]),
  lead: () => Promise.reject(new Error('the leader could not start its informers')),
});

import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError, parseConfig } from './config.js';
import { youngGenerationFlag, youngGenerationLaunch } from './young-generation.js';

describe('youngGenerationLaunch', () => {
  it('when a component starts with nothing set, it should restart with its default cap', () => {
    assert.deepEqual(youngGenerationLaunch('drainer', ['--namespaces=a'], {}, []), {
      restart: true,
      nodeFlags: ['--max-semi-space-size=8'],
    });
  });

  it('when the flag or the environment sets a size, it should restart with it, the command line winning', () => {
    const env = { KINDLING_MAX_SEMI_SPACE_SIZE: '32' };
    assert.deepEqual(youngGenerationLaunch('drainer', [], env, []), {
      restart: true,
      nodeFlags: ['--max-semi-space-size=32'],
    });
    assert.deepEqual(youngGenerationLaunch('drainer', ['--max-semi-space-size', '4'], env, []), {
      restart: true,
      nodeFlags: ['--max-semi-space-size=4'],
    });
    assert.deepEqual(youngGenerationLaunch('drainer', ['--max-semi-space-size=16'], env, []), {
      restart: true,
      nodeFlags: ['--max-semi-space-size=16'],
    });
  });

  it('when Node already has the flag (a restart, a node flag, NODE_OPTIONS), it should run as it is', () => {
    const set = { restart: false, reason: 'set-for-node' };
    assert.deepEqual(youngGenerationLaunch('drainer', [], {}, ['--max-semi-space-size=8']), set);
    assert.deepEqual(youngGenerationLaunch('drainer', [], { NODE_OPTIONS: '--max-semi-space-size=64' }, []), set);
    assert.deepEqual(youngGenerationLaunch('drainer', [], {}, ['--max_semi_space_size=32']), set);
    assert.deepEqual(youngGenerationLaunch('drainer', [], { NODE_OPTIONS: '--max_semi_space_size 32' }, []), set);
  });

  it("when the size is 0, it should leave Node's own sizing", () => {
    assert.deepEqual(youngGenerationLaunch('drainer', ['--max-semi-space-size=0'], {}, []), {
      restart: false,
      reason: 'node-default',
    });
  });

  it("when the ignition server starts with nothing set, it should keep Node's own sizing (its serving threads' speed)", () => {
    assert.deepEqual(youngGenerationLaunch('ignition-server', [], {}, []), { restart: false, reason: 'node-default' });
    assert.deepEqual(youngGenerationLaunch('ignition-server', [], { KINDLING_MAX_SEMI_SPACE_SIZE: '16' }, []), {
      restart: true,
      nodeFlags: ['--max-semi-space-size=16'],
    });
  });

  it('when the command is not a long-running component, it should not restart', () => {
    assert.deepEqual(youngGenerationLaunch('status', [], {}, []), { restart: false, reason: 'not-a-component' });
  });

  it('when the size is not a whole number of MiB, it should refuse it with the flag named', () => {
    for (const bad of ['-1', '8m', '', '99999'])
      assert.throws(
        () => youngGenerationLaunch('drainer', [`--max-semi-space-size=${bad}`], {}, []),
        (err: unknown) =>
          err instanceof ConfigError && /--max-semi-space-size: ".*" is not a size in MiB/.test(err.message),
      );
  });

  it("when a component's flags are read, it should accept the flag with the component's default", () => {
    assert.equal(parseConfig(youngGenerationFlag('nodepool-controller'), [], {}).maxSemiSpaceSize, 8);
    assert.equal(parseConfig(youngGenerationFlag('drainer'), ['--max-semi-space-size=12'], {}).maxSemiSpaceSize, 12);
  });
});

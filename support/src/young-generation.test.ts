import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError, parseConfig } from './config.js';
import { heapFlags, youngGenerationLaunch } from './young-generation.js';

const IGNITION_EXTRAS = ['--no-memory-reducer', '--heap-growing-percent=100'];

describe('youngGenerationLaunch', () => {
  it("when a component starts with nothing set, it should restart with its default cap and V8's memory saver", () => {
    assert.deepEqual(youngGenerationLaunch('drainer', ['--namespaces=a'], {}, []), {
      restart: true,
      nodeFlags: ['--max-semi-space-size=8', '--memory-saver-mode'],
    });
  });

  it('when the flag or the environment sets a size, it should restart with it, the command line winning', () => {
    const env = { KINDLING_MAX_SEMI_SPACE_SIZE: '32' };
    assert.deepEqual(youngGenerationLaunch('drainer', [], env, []), {
      restart: true,
      nodeFlags: ['--max-semi-space-size=32', '--memory-saver-mode'],
    });
    assert.deepEqual(youngGenerationLaunch('drainer', ['--max-semi-space-size', '4'], env, []), {
      restart: true,
      nodeFlags: ['--max-semi-space-size=4', '--memory-saver-mode'],
    });
    assert.deepEqual(youngGenerationLaunch('drainer', ['--max-semi-space-size=16'], env, []), {
      restart: true,
      nodeFlags: ['--max-semi-space-size=16', '--memory-saver-mode'],
    });
  });

  it('when Node already has both flags (a restart, node flags, NODE_OPTIONS), it should run as it is', () => {
    const set = { restart: false };
    const saver = ['--memory-saver-mode'];
    assert.deepEqual(youngGenerationLaunch('drainer', [], {}, ['--max-semi-space-size=8', ...saver]), set);
    assert.deepEqual(youngGenerationLaunch('drainer', [], { NODE_OPTIONS: '--max-semi-space-size=64' }, saver), set);
    assert.deepEqual(youngGenerationLaunch('drainer', [], {}, ['--max_semi_space_size=32', ...saver]), set);
    assert.deepEqual(youngGenerationLaunch('drainer', [], { NODE_OPTIONS: '--max_semi_space_size 32' }, saver), set);
    assert.deepEqual(
      youngGenerationLaunch('drainer', [], {}, ['--no-memory-saver-mode', '--max-semi-space-size=8']),
      set,
    );
  });

  it('when Node has only one of the flags, it should add the other and keep the given one', () => {
    const semi = { NODE_OPTIONS: '--max-semi-space-size=16' };
    assert.deepEqual(youngGenerationLaunch('drainer', [], semi, []), {
      restart: true,
      nodeFlags: ['--memory-saver-mode'],
    });
    assert.deepEqual(youngGenerationLaunch('drainer', [], {}, ['--memory-saver-mode']), {
      restart: true,
      nodeFlags: ['--max-semi-space-size=8'],
    });
    assert.deepEqual(youngGenerationLaunch('drainer', [], {}, ['--no-memory-saver-mode']), {
      restart: true,
      nodeFlags: ['--max-semi-space-size=8'],
    });
  });

  it('when the size is 0, it should leave the young generation to Node and still start the memory saver', () => {
    assert.deepEqual(youngGenerationLaunch('drainer', ['--max-semi-space-size=0'], {}, []), {
      restart: true,
      nodeFlags: ['--memory-saver-mode'],
    });
  });

  it("when the ignition server starts with nothing set, it should keep Node's own young generation and start the memory saver without V8's memory reducer and with room for a storm", () => {
    assert.deepEqual(youngGenerationLaunch('ignition-server', [], {}, []), {
      restart: true,
      nodeFlags: ['--memory-saver-mode', ...IGNITION_EXTRAS],
    });
    assert.deepEqual(youngGenerationLaunch('ignition-server', [], { KINDLING_MAX_SEMI_SPACE_SIZE: '16' }, []), {
      restart: true,
      nodeFlags: ['--max-semi-space-size=16', '--memory-saver-mode', ...IGNITION_EXTRAS],
    });
  });

  it("when Node is given a growing factor or the reducer itself, it should add only the other of the ignition server's flags", () => {
    for (const given of [['--heap-growing-percent=20'], ['--heap_growing_percent=0']])
      assert.deepEqual(youngGenerationLaunch('ignition-server', [], {}, given), {
        restart: true,
        nodeFlags: ['--memory-saver-mode', '--no-memory-reducer'],
      });
    assert.deepEqual(youngGenerationLaunch('ignition-server', [], {}, ['--memory-reducer']), {
      restart: true,
      nodeFlags: ['--memory-saver-mode', '--heap-growing-percent=100'],
    });
  });

  it('when Node is given both, or --optimize-for-size, or Kindling does not start the memory saver, it should leave the reducer and the growing factor as they are', () => {
    const both = ['--heap-growing-percent=0'];
    for (const given of [['--memory-reducer', ...both], ['--no-memory_reducer', ...both], ['--optimize-for-size']])
      assert.deepEqual(youngGenerationLaunch('ignition-server', [], {}, given), {
        restart: true,
        nodeFlags: ['--memory-saver-mode'],
      });
    assert.deepEqual(youngGenerationLaunch('ignition-server', [], {}, ['--memory-saver-mode']), { restart: false });
    assert.deepEqual(youngGenerationLaunch('ignition-server', ['--memory-saver=false'], {}, []), { restart: false });
  });

  it("when Node is given --no-optimize-for-size, it should add the ignition server's flags, as the governor starts", () => {
    assert.deepEqual(youngGenerationLaunch('ignition-server', [], {}, ['--no-optimize-for-size']), {
      restart: true,
      nodeFlags: ['--memory-saver-mode', ...IGNITION_EXTRAS],
    });
  });

  it("when a controller starts with the memory saver, it should keep the memory reducer and V8's growing factor (no one waits on its pauses)", () => {
    assert.deepEqual(youngGenerationLaunch('drainer', [], {}, []), {
      restart: true,
      nodeFlags: ['--max-semi-space-size=8', '--memory-saver-mode'],
    });
  });

  it('when the command is not a long-running component, it should not restart', () => {
    assert.deepEqual(youngGenerationLaunch('status', [], {}, []), { restart: false });
  });

  it('when the size is not a whole number of MiB, it should refuse it with the flag named', () => {
    for (const bad of ['-1', '8m', '', '99999'])
      assert.throws(
        () => youngGenerationLaunch('drainer', [`--max-semi-space-size=${bad}`], {}, []),
        (err: unknown) =>
          err instanceof ConfigError && /--max-semi-space-size: ".*" is not a size in MiB/.test(err.message),
      );
  });

  it('when the memory saver is turned off by the flag or the environment, it should restart without it, the command line winning', () => {
    const off = { KINDLING_MEMORY_SAVER: 'false' };
    assert.deepEqual(youngGenerationLaunch('drainer', [], off, []), {
      restart: true,
      nodeFlags: ['--max-semi-space-size=8'],
    });
    assert.deepEqual(youngGenerationLaunch('drainer', ['--memory-saver=0'], {}, []), {
      restart: true,
      nodeFlags: ['--max-semi-space-size=8'],
    });
    assert.deepEqual(youngGenerationLaunch('drainer', ['--memory-saver'], off, []), {
      restart: true,
      nodeFlags: ['--max-semi-space-size=8', '--memory-saver-mode'],
    });
    assert.deepEqual(youngGenerationLaunch('ignition-server', ['--memory-saver=false'], {}, []), { restart: false });
    assert.throws(
      () => youngGenerationLaunch('drainer', ['--memory-saver=no'], {}, []),
      (err: unknown) => err instanceof ConfigError && /--memory-saver: "no" is not true or false/.test(err.message),
    );
  });

  it("when a component's flags are read, it should accept both flags with the component's defaults", () => {
    assert.equal(parseConfig(heapFlags('nodepool-controller'), [], {}).maxSemiSpaceSize, 8);
    assert.equal(parseConfig(heapFlags('drainer'), ['--max-semi-space-size=12'], {}).maxSemiSpaceSize, 12);
    assert.equal(parseConfig(heapFlags('drainer'), [], {}).memorySaver, true);
    assert.equal(parseConfig(heapFlags('drainer'), ['--memory-saver=false'], {}).memorySaver, false);
  });
});

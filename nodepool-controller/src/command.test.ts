import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { parseConfig } from '../../support/src/config.js';
import { NODEPOOL_CONTROLLER_FLAGS, nodePoolControllerCommand } from './command.js';

describe('kindling nodepool-controller', () => {
  it('when the ignition endpoint or CA file is missing, it should refuse to start with exit code 2', async () => {
    let err = '';
    const cfg = parseConfig(NODEPOOL_CONTROLLER_FLAGS, ['--ignition-endpoint', 'ign.example:443'], {});
    const code = await nodePoolControllerCommand.run(cfg, { out: () => {}, err: (t) => (err += t), env: {} }, []);
    assert.equal(code, 2);
    assert.match(err, /--ignition-ca-file are required/);
  });

  it('when flags are given, it should parse the grace as a duration and the defaults as documented', () => {
    const cfg = parseConfig(NODEPOOL_CONTROLLER_FLAGS, ['--token-grace', '30m', '--max-skew-minors=2'], {});
    assert.equal(cfg.tokenGrace, 1_800_000);
    assert.equal(cfg.maxSkewMinors, 2);
    assert.equal(parseConfig(NODEPOOL_CONTROLLER_FLAGS, [], {}).tokenGrace, 7_200_000);
  });
});

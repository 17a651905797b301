import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { missingTools } from './all.js';

describe('npm run bench, before it starts', () => {
  it('when nginx and wrk are missing, it should name them with their packages and the set-up command to run', () => {
    assert.equal(
      missingTools(['ignition', 'controller'], () => false),
      'the benchmarks need /usr/sbin/nginx (Debian nginx-light), /usr/bin/wrk (Debian wrk): run `npm run setup -- --bench` (or `sudo apt-get install nginx-light wrk`), then npm run bench again',
    );
  });

  it('when only one tool is missing, it should name just that one', () => {
    assert.match(missingTools(['ignition'], (p) => p !== '/usr/bin/wrk') ?? '', /need \/usr\/bin\/wrk \(Debian wrk\)/);
  });

  it('when the tools are there, or no chosen benchmark needs one, it should have nothing to say', () => {
    assert.equal(
      missingTools(['ignition'], () => true),
      undefined,
    );
    assert.equal(
      missingTools(['controller', 'rollout'], () => false),
      undefined,
    );
  });
});

// One Node.js for everything: the version npm scripts run on (the pinned `node` development dependency), the
// supported range in `engines` and the image's base are one release line, and that line is supported today.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { runtimeSupport } from '../../support/src/runtime.js';

const ROOT = new URL('../../../', import.meta.url);
const pkg = JSON.parse(readFileSync(new URL('package.json', ROOT), 'utf8')) as {
  engines: { node: string };
  devDependencies: Record<string, string>;
};
const dockerfile = readFileSync(new URL('Dockerfile', ROOT), 'utf8');
const major = (version: string): number => Number(/(\d+)\./.exec(version)?.[1]);

describe('the pinned Node.js', () => {
  const pinned = pkg.devDependencies.node ?? '';

  it('when npm scripts run, it should be the pinned version and nothing else', () => {
    assert.match(pinned, /^\d+\.\d+\.\d+$/, 'the `node` development dependency is an exact version');
    assert.equal(process.version, `v${pinned}`);
  });

  it('when engines and the image name a release line, it should be the pinned one', () => {
    assert.equal(major(pkg.engines.node), major(pinned));
    const bases = [...dockerfile.matchAll(/^FROM node:(\d+)-/gm)].map((m) => Number(m[1]));
    assert.deepEqual(bases, [major(pinned), major(pinned)]);
  });

  it('when today is checked against its end of life, it should be more than three months away', () => {
    assert.equal(runtimeSupport(`v${pinned}`, new Date()).state, 'supported');
  });
});

import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { TerminalError } from '../../support/src/errors.js';
import { checkVersionSkew, skewCondition, SKEW_POLICIES, type SkewInput } from './skew.js';
import { compareVersions, parseVersion, referenceTag, tagVersionResolver, type Version } from './release.js';

const v = (text: string): Version => parseVersion(text) ?? assert.fail(`bad version ${text}`);

describe('tagVersionResolver', () => {
  it('when the tag is a version with or without v, it should read it', async () => {
    assert.deepEqual(await tagVersionResolver.versionOf('registry.local:5000/kindling/release:1.36.3'), {
      major: 1,
      minor: 36,
      patch: 3,
      prerelease: '',
    });
    assert.deepEqual(await tagVersionResolver.versionOf('release:v1.37.0-rc.1@sha256:abcd'), {
      major: 1,
      minor: 37,
      patch: 0,
      prerelease: 'rc.1',
    });
  });

  it('when the reference has no version tag, it should refuse it as InvalidImage', async () => {
    for (const image of [
      'registry.local:5000/kindling/release',
      'release:latest',
      'release@sha256:abcd',
      'not an image',
    ]) {
      await assert.rejects(
        tagVersionResolver.versionOf(image),
        (err: unknown) => err instanceof TerminalError && err.reason === 'InvalidImage',
        image,
      );
    }
  });

  it('when a registry has a port, it should not mistake the port for a tag', () => {
    assert.equal(referenceTag('registry.local:5000/release'), undefined);
  });

  it('when comparing a pre-release with its release, it should order the pre-release first', () => {
    assert.ok(compareVersions(v('1.37.0-rc.1'), v('1.37.0')) < 0);
    assert.ok(compareVersions(v('1.36.10'), v('1.36.9')) > 0);
  });
});

describe('checkVersionSkew', () => {
  const base = (patch: Partial<SkewInput>): SkewInput => ({
    node: v('1.36.3'),
    controlPlane: v('1.36.3'),
    maxMinorsBehind: 3,
    allowPrerelease: false,
    ...patch,
  });
  const cases: [string, Partial<SkewInput>, string | true][] = [
    ['the node matches the control plane', {}, true],
    ['the node is 3 minors behind with a limit of 3', { node: v('1.33.0') }, true],
    ['an upgrade moves one minor', { node: v('1.36.0'), current: v('1.35.2') }, true],
    ['a pre-release is opted in', { node: v('1.36.0-rc.1'), allowPrerelease: true }, true],
    ['the node is a newer patch than the control plane', { node: v('1.36.4') }, 'NodeNewerThanControlPlane'],
    ['the node is a newer minor than the control plane', { node: v('1.37.0') }, 'NodeNewerThanControlPlane'],
    ['the node is 4 minors behind with a limit of 3', { node: v('1.32.9') }, 'TooFarBehindControlPlane'],
    [
      'the node is 2 minors behind with a limit of 1',
      { node: v('1.34.0'), maxMinorsBehind: 1 },
      'TooFarBehindControlPlane',
    ],
    ['the node is a major behind', { node: v('0.36.0') }, 'TooFarBehindControlPlane'],
    ['an upgrade skips a minor', { node: v('1.36.0'), current: v('1.34.5') }, 'UpgradeSkipsMinor'],
    ['a pre-release is not opted in', { node: v('1.36.0-rc.1') }, 'PrereleaseNotAllowed'],
    ['the release is older than the nodes run', { node: v('1.36.2'), current: v('1.36.3') }, 'Downgrade'],
    ['a downgrade crosses a minor', { node: v('1.35.9'), current: v('1.36.3') }, 'Downgrade'],
    ['the pool allows a downgrade', { node: v('1.36.2'), current: v('1.36.3'), allowSkips: ['Downgrade'] }, true],
    [
      'a rollout that did not finish is moved back to the release every node ran',
      { node: v('1.36.2'), current: v('1.36.3'), completed: v('1.36.2') },
      true,
    ],
    [
      'a pool moves below the release every node ran',
      { node: v('1.36.1'), current: v('1.36.3'), completed: v('1.36.2') },
      'Downgrade',
    ],
    [
      'the pool allows only a minor skip and the release is a downgrade',
      { node: v('1.36.2'), current: v('1.36.3'), allowSkips: ['MinorSkip'] },
      'Downgrade',
    ],
    ['the pool allows a minor skip', { node: v('1.36.0'), current: v('1.34.5'), allowSkips: ['MinorSkip'] }, true],
    [
      'the pool allows every skip and the node is newer than the control plane',
      { node: v('1.37.0'), current: v('1.36.3'), allowSkips: ['Downgrade', 'MinorSkip'] },
      'NodeNewerThanControlPlane',
    ],
  ];
  for (const [condition, patch, expected] of cases) {
    it(`when ${condition}, it should ${expected === true ? 'pass' : `fail with ${expected}`}`, () => {
      const verdict = checkVersionSkew(base(patch));
      if (expected === true) assert.equal(verdict.ok, true, verdict.message);
      else
        assert.deepEqual(
          { ok: verdict.ok, reason: verdict.ok ? undefined : verdict.reason },
          { ok: false, reason: expected },
        );
    });
  }

  it('when refusing, it should say what to do in the message', () => {
    const verdict = checkVersionSkew(base({ node: v('1.32.0') }));
    assert.equal(
      verdict.message,
      'Release v1.32.0 is 4 minor versions behind the control plane (v1.36.3); at most 3 are supported: choose a release of 1.33 or later',
    );
    assert.match(
      checkVersionSkew(base({ node: v('1.36.0'), current: v('1.34.0') })).message,
      /upgrade to a 1.35 release first/,
    );
  });

  it('when a skippable rule is overridden, it should pass and say so, and the condition should be True with reason Overridden', () => {
    const verdict = checkVersionSkew(base({ node: v('1.36.2'), current: v('1.36.3'), allowSkips: ['Downgrade'] }));
    assert.deepEqual(verdict.ok && verdict.overridden, ['Downgrade']);
    assert.match(verdict.message, /Overridden by spec\.release\.allowSkips \(Downgrade\): Release v1\.36\.2 is older/);
    assert.equal(skewCondition(verdict).reason, 'Overridden');
    assert.equal(skewCondition(checkVersionSkew(base({}))).reason, 'AsExpected');
  });

  it('when listing the rules, it should make only the downgrade and the minor skip skippable', () => {
    assert.deepEqual(
      SKEW_POLICIES.map((p) => [p.reason, p.skippable]),
      [
        ['PrereleaseNotAllowed', undefined],
        ['NodeNewerThanControlPlane', undefined],
        ['TooFarBehindControlPlane', undefined],
        ['Downgrade', 'Downgrade'],
        ['UpgradeSkipsMinor', 'MinorSkip'],
      ],
    );
  });
});

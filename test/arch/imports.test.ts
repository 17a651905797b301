import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join, relative, sep } from 'node:path';
import { pathToFileURL } from 'node:url';
import { FOLDERS, ROOT, cycles, importEdges, loadedBy } from './imports.js';

type FenceViolation = (from: string, to: string) => string | undefined;

/** The fence lives in eslint.config.js (the lint enforces it per file); this reads the same function. */
async function loadFence(): Promise<FenceViolation> {
  const config = (await import(pathToFileURL(join(ROOT, 'eslint.config.js')).href)) as {
    fenceViolation: FenceViolation;
  };
  return config.fenceViolation;
}

describe('the import graph', () => {
  const edges = importEdges();

  it('when the sources are read, it should find their imports (the check is not vacuous)', () => {
    assert.ok(edges.length > 500, `only ${edges.length} imports found`);
    assert.ok(edges.some((e) => e.from === 'cli/src/commands.ts' && e.to === 'nodepool-controller/src/command.ts'));
  });

  it('when files import one another, it should find no cycle among them', () => {
    assert.deepEqual(cycles(edges), []);
  });

  it('when a cycle is made, it should report its files', () => {
    const made = [
      ...edges,
      { from: 'a.ts', to: 'b.ts' },
      { from: 'b.ts', to: 'c.ts' },
      { from: 'c.ts', to: 'a.ts' },
      { from: 'c.ts', to: 'd.ts' },
    ];
    assert.deepEqual(cycles(made), [['a.ts', 'b.ts', 'c.ts']]);
  });

  it('when every import is checked against the fence, it should find no crossing', async () => {
    const fence = await loadFence();
    const crossings = edges.map((e) => ({ ...e, why: fence(e.from, e.to) })).filter((e) => e.why !== undefined);
    assert.deepEqual(crossings, []);
  });
});

describe('the fence', () => {
  const cases: [string, string, boolean][] = [
    ['nodepool-controller/src/phases.ts', 'api/src/keys.ts', true],
    ['nodepool-controller/src/phases.ts', 'support/src/errors.ts', true],
    ['drainer/src/drainer.ts', 'inplace-upgrader/src/rollout-decision.ts', false],
    ['inplace-upgrader/src/upgrader.ts', 'drainer/src/plan.ts', false],
    ['nodepool-controller/src/command.ts', 'cli/src/main.ts', false],
    ['support/src/apply.ts', 'nodepool-controller/src/diff.ts', false],
    ['api/src/keys.ts', 'support/src/errors.ts', false],
    ['cli/src/plan.ts', 'nodepool-controller/src/preview.ts', true],
    ['cli/src/plan.ts', 'nodepool-controller/src/phases.ts', false],
    ['cli/src/commands.ts', 'drainer/src/command.ts', true],
    ['cli/src/commands.ts', 'node-agent/src/command.ts', true],
    ['node-agent/src/agent.ts', 'api/src/node-agent.ts', true],
    ['node-agent/src/agent.ts', 'support/src/ignition/ignition.ts', true],
    ['node-agent/src/agent.ts', 'inplace-upgrader/src/desired.ts', false],
    ['inplace-upgrader/src/extension/blockers-thread.ts', 'node-agent/src/root.ts', false],
    ['cli/src/status.ts', 'drainer/src/command.ts', false],
    ['nodepool-controller/src/capi.ts', 'nodepool-controller/testing/fixtures.ts', false],
    ['support/src/informer.ts', 'test/bed/src/index.ts', false],
    ['ignition-server/src/app.ts', 'local/src/credentials.ts', false],
    ['ignition-server/src/server.cluster.test.ts', 'test/bed/src/index.ts', true],
    ['nodepool-controller/src/controller.cluster.test.ts', 'ignition-server/testing/index.ts', true],
    ['nodepool-controller/src/controller.cluster.test.ts', 'ignition-server/src/app.ts', false],
    ['test/bench/inplace.ts', 'drainer/src/drainer.ts', true],
    ['local/src/components.ts', 'cli/src/commands.ts', true],
    ['local/src/components.ts', 'drainer/src/evict.ts', false],
  ];
  for (const [from, to, allowed] of cases) {
    it(`when ${from} imports ${to}, it should ${allowed ? 'allow' : 'refuse'} it`, async () => {
      const fence = await loadFence();
      assert.equal(fence(from, to) === undefined, allowed, fence(from, to));
    });
  }
});

describe("the image's compile (tsconfig.build.json)", () => {
  it('when it lists what it compiles, it should hold the product sources and no test code', () => {
    const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
    const run = spawnSync(process.execPath, [tsc, '-p', join(ROOT, 'tsconfig.build.json'), '--listFilesOnly'], {
      encoding: 'utf8',
    });
    assert.equal(run.status, 0, run.stdout + run.stderr);
    const ours = run.stdout
      .split('\n')
      .map((line) => relative(ROOT, line.trim()).split(sep).join('/'))
      .filter((file) => FOLDERS.some((f) => file.startsWith(`${f}/`)));
    assert.ok(
      ours.includes('cli/src/main.ts') && ours.includes('nodepool-controller/src/controller.ts'),
      'the product is compiled',
    );
    const testCode = ours.filter(
      (f) =>
        f.endsWith('.test.ts') ||
        f.includes('/testing/') ||
        f.startsWith('local/') ||
        f.startsWith('test/') ||
        !f.includes('/src/'),
    );
    assert.deepEqual(testCode, []);
  });
});

describe("a serving thread's imports", () => {
  it("when a serving thread starts, it should load neither prom-client, tar-stream nor node:http (whose exports load Node's own undici)", () => {
    const { files, packages } = loadedBy('ignition-server/src/serving/thread.ts');
    assert.ok(
      files.includes('ignition-server/src/app.ts') && packages.includes('jose'),
      'the walk follows the imports',
    );
    for (const unwanted of ['prom-client', 'tar-stream', 'node:http'])
      assert.ok(!packages.includes(unwanted), `${unwanted} is loaded by ${packages.join(', ')}`);
  });
});

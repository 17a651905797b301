import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { main } from './main.js';
import { defineCommand, lazyCommand } from '../../support/src/command.js';

function io(): { out: string[]; err: string[]; io: Parameters<typeof main>[1] } {
  const out: string[] = [];
  const err: string[] = [];
  return {
    out,
    err,
    io: { out: (t) => void out.push(t), err: (t) => void err.push(t), env: { KINDLING_GREETING: 'hi' } },
  };
}

const echo = defineCommand({
  name: 'echo',
  summary: 'Echo the config.',
  args: '<word>',
  flags: {
    greeting: { type: 'string', default: 'hello', help: 'What to say' },
    times: { type: 'int', default: 1, help: 'How often' },
    loud: { type: 'bool', default: false, help: 'Shout' },
  },
  async run(cfg, io, args) {
    io.out(JSON.stringify({ ...cfg, args }));
    return 0;
  },
});

describe('kindling main', () => {
  it('when a subcommand runs, it should get its typed config from flags and environment and its positional args', async () => {
    const t = io();
    assert.equal(await main(['echo', 'world', '--times', '3', '--loud'], t.io, [echo]), 0);
    assert.deepEqual(JSON.parse(t.out.join('')), { greeting: 'hi', times: 3, loud: true, args: ['world'] });
  });

  it("when asked for a subcommand's help, it should list every flag with its default", async () => {
    const t = io();
    assert.equal(await main(['echo', '--help'], t.io, [echo]), 0);
    assert.match(
      t.out.join(''),
      /Usage: kindling echo <word> \[flags\][\s\S]*--times <int>[\s\S]*default: "1", env: KINDLING_TIMES/,
    );
  });

  it('when the command or a flag is unknown, it should exit 2 with a message', async () => {
    const t = io();
    assert.equal(await main(['nope'], t.io, [echo]), 2);
    assert.match(t.err.join(''), /unknown command "nope"/);
    assert.equal(await main(['echo', '--tims=2'], t.io, [echo]), 2);
    assert.match(t.err.join(''), /unknown flag "--tims=2"/);
  });

  it('when a command is listed lazily, it should import its module only to run it or show its help', async () => {
    let loads = 0;
    const lazy = lazyCommand('echo', 'Echo the config.', () => {
      loads++;
      return Promise.resolve(echo);
    });
    const t = io();
    assert.equal(await main([], t.io, [lazy]), 2);
    assert.match(t.out.join(''), /echo {2}Echo the config\./);
    assert.equal(loads, 0, 'the usage lists it unloaded');
    assert.equal(await main(['echo', '--help'], t.io, [lazy]), 0);
    assert.match(t.out.join(''), /--times <int>/);
    assert.equal(await main(['echo', 'w', '--times', '2'], t.io, [lazy]), 0);
    assert.deepEqual(JSON.parse(t.out.at(-1) ?? ''), { greeting: 'hi', times: 2, loud: false, args: ['w'] });
    assert.equal(loads, 2);
  });

  it('when a long-running component starts in a restartable Node, it should restart with its V8 heap flags before importing it', async () => {
    let loads = 0;
    const drainer = lazyCommand('drainer', 'Drain.', () => {
      loads++;
      return Promise.resolve(echo);
    });
    const restarts: string[][] = [];
    const t = io();
    const node = { execArgv: [], restart: (flags: string[]) => (restarts.push(flags), 0) };
    assert.equal(await main(['drainer', '--namespaces=a'], { ...t.io, node }, [drainer]), 0);
    assert.deepEqual(restarts, [['--max-semi-space-size=8', '--memory-saver-mode']]);
    assert.equal(loads, 0);
    const bad = io();
    assert.equal(await main(['drainer', '--max-semi-space-size=lots'], { ...bad.io, node }, [drainer]), 2);
    assert.match(bad.err.join(''), /kindling drainer: --max-semi-space-size: "lots" is not a size in MiB/);
    assert.equal(restarts.length, 1);
  });

  it('when the real crds command runs, it should print the NodePool CRD', async () => {
    const t = io();
    assert.equal(await main(['crds'], t.io), 0);
    assert.match(t.out.join(''), /name: nodepools\.kindling\.dev/);
  });
});

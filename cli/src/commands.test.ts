import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { loadCommand } from '../../support/src/command.js';
import { COMMANDS } from './commands.js';
import { main } from './main.js';

describe('kindling commands', () => {
  it('when a command is listed before its module is imported, it should load the command of its name, with the summary written where it is listed', async () => {
    for (const listed of COMMANDS) {
      const loaded = await loadCommand(listed);
      assert.equal(loaded.summary, listed.summary, `summary of ${listed.name}`);
      assert.equal(loaded.load, undefined, `${listed.name} is loaded in full`);
      assert.ok(
        Object.keys(loaded.flags).length > 0 || ['version', 'crds'].includes(listed.name),
        `${listed.name} has its flags once loaded`,
      );
    }
  });

  it('when a listed command names a module that defines another command, loading it should fail with both names', async () => {
    const wrong = {
      ...COMMANDS[0],
      name: 'nope',
      load: () => loadCommand(COMMANDS[0] as (typeof COMMANDS)[0]),
    } as (typeof COMMANDS)[0];
    await assert.rejects(loadCommand(wrong), /kindling nope: its module defines version/);
  });
});

describe('kindling components without --namespaces', () => {
  /** The flags each needs besides --namespaces, so the namespaces are what it refuses on. */
  const OTHERS: Record<string, string[]> = {
    'nodepool-controller': ['--ignition-endpoint=ign.example:443', '--ignition-ca-file=/nonexistent/ca.crt'],
    'inplace-upgrader': ['--ignition-url=https://ign.example'],
    drainer: [],
    'ignition-server': ['--tls-cert-file=/x', '--tls-key-file=/x', '--signing-key-file=/x'],
  };

  for (const [component, flags] of Object.entries(OTHERS))
    it(`when ${component} is started without --namespaces, it should refuse (exit 2) before reading a file or reaching an apiserver`, async () => {
      let err = '';
      const code = await main([component, ...flags], { out: () => undefined, err: (t) => void (err += t), env: {} });
      assert.equal(code, 2);
      assert.match(err, /--namespaces is required/);
    });
});

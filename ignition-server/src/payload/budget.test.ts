import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { gzipSync } from 'node:zlib';
import { checkConfigBytes } from './budget.js';
import { InvalidConfigError } from './render.js';
import type { Release } from '../release/types.js';

const MIB = 1024 * 1024;
const release: Release = {
  digest: 'sha256:0',
  manifest: { version: '1', kubeletVersion: 'v1.31.0', osImage: 'x' },
  fragments: [
    {
      name: '00-base.json',
      config: {
        ignition: { version: '3.4.0' },
        storage: { files: [{ path: '/etc/base', contents: { source: 'data:,base' } }] },
      },
    },
  ],
};
const gz = (bytes: Buffer): string => `data:;base64,${gzipSync(bytes).toString('base64')}`;
const machineConfig = (name: string, ...sources: string[]): object => ({
  apiVersion: 'machineconfiguration.openshift.io/v1',
  kind: 'MachineConfig',
  metadata: { name },
  spec: {
    config: {
      ignition: { version: '3.4.0' },
      storage: {
        files: sources.map((source, i) => ({ path: `/etc/${name}-${i}`, contents: { source, compression: 'gzip' } })),
      },
    },
  },
});

describe('the byte budget of a payload in the ignition server', () => {
  it('when a MachineConfig holds 700 MiB of zeros as gzip, it should refuse it naming the MachineConfig, the file and the limit', async () => {
    const member = gzipSync(Buffer.alloc(70 * MIB));
    const bomb = `data:;base64,${Buffer.concat(Array.from({ length: 10 }, () => member)).toString('base64')}`;
    assert.ok(bomb.length < MIB, 'fits in a ConfigMap');
    await assert.rejects(checkConfigBytes(release, [machineConfig('zeros', bomb)], 64 * MIB), (err) => {
      assert.ok(err instanceof InvalidConfigError);
      assert.match(
        err.message,
        /^MachineConfig zeros \(storage\.files\[\/etc\/zeros-0\]\) inflates past the limit of 64 MiB \(4 bytes of it already taken before it\): .*--max-config-bytes/,
      );
      return true;
    });
  });

  it('when the files of several MachineConfigs each fit but not together, it should refuse the one that passes the sum', async () => {
    const half = gz(Buffer.alloc(MIB / 2));
    const docs = [machineConfig('a', half), machineConfig('b', half)];
    await checkConfigBytes(release, docs, MIB + 4);
    await assert.rejects(checkConfigBytes(release, docs, MIB), {
      message: /^MachineConfig b \(storage\.files\[\/etc\/b-0\]\)/,
    });
  });

  it('when a file is not gzip though it says so, it should say so', async () => {
    await assert.rejects(checkConfigBytes(release, [machineConfig('a', 'data:,plain')], MIB), {
      message: 'MachineConfig a (storage.files[/etc/a-0]): not valid gzip',
    });
  });
});

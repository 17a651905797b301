/**
 * Kindling's Cluster API Runtime Extension in the local environment: the inplace-upgrader serves the in-place
 * update hooks on a loopback port kept in the state folder, with a certificate from the management cluster's
 * CA, and an ExtensionConfig registers it with the Cluster API manager (which runs with RuntimeSDK and
 * InPlaceUpdates), as deploy/ does with a Service in a real management cluster.
 */
import { access, mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createApplier } from '../../support/src/apply.js';
import { loadCertificateAuthority } from '../../test/bed/src/pki.js';
import { eventually, type Cluster } from '../../test/bed/src/index.js';
import { extensionConfig } from '../../inplace-upgrader/src/preview.js';
import { keptPort } from '../../test/bed/src/index.js';
import { SIMULATION } from '../../test/bed/src/keys.js';

export interface ExtensionFiles {
  port: number;
  certFile: string;
  keyFile: string;
}

/** The extension's port and serving certificate; made once, then reused. */
export async function extensionFiles(stateDir: string, mgmt: Cluster): Promise<ExtensionFiles> {
  const dir = join(stateDir, 'extension');
  await mkdir(dir, { recursive: true });
  const files: ExtensionFiles = {
    port: await keptPort(join(dir, 'port')),
    certFile: join(dir, 'tls.crt'),
    keyFile: join(dir, 'tls.key'),
  };
  if (
    await access(files.keyFile).then(
      () => true,
      () => false,
    )
  )
    return files;
  const ca = await loadCertificateAuthority(mgmt.ca);
  const serving = await ca.issue({
    commonName: 'kindling-inplace-extension',
    ipAddresses: ['127.0.0.1'],
    dnsNames: ['localhost'],
    usage: 'server',
  });
  await writeFile(files.certFile, serving.certPem);
  await writeFile(files.keyFile, serving.keyPem, { mode: 0o600 });
  return files;
}

/** The ExtensionConfig pointing the Cluster API manager at the extension (trusting the management CA). */
export async function registerExtension(mgmt: Cluster, files: ExtensionFiles): Promise<void> {
  const applier = createApplier(mgmt.kubeConfig, SIMULATION.fieldManager);
  // Right after the CRDs are installed their storage can still answer 429: apply until it is accepted.
  await eventually(
    'the ExtensionConfig to be accepted',
    () =>
      applier
        .apply(extensionConfig({ url: `https://127.0.0.1:${files.port}`, caPem: mgmt.ca.certPem }))
        .then(() => true),
    30_000,
    250,
  );
}

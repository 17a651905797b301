/** Helpers shared by this folder's tests (keys, a manual clock); never imported by production code. */
import { generateKeyPairSync } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Clock } from '../../support/src/timers.js';

/** A fresh PKCS#8 PEM EC private key. */
export function ecKeyPem(curve = 'P-256'): string {
  return generateKeyPairSync('ec', { namedCurve: curve }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
}

/** A clock that only moves when told. */
export function manualClock(start = Date.UTC(2026, 10, 23, 8)): Clock & { advance: (ms: number) => void } {
  let now = start;
  return {
    now: () => now,
    setTimeout: (fn, ms) => setTimeout(fn, ms),
    clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout),
    advance: (ms) => void (now += ms),
  };
}


export const RELEASE_MANIFEST = { version: '4.18.2', kubeletVersion: 'v1.36.3', osImage: 'Kindling Linux 42' };

/** Base fragments of the test release: a file, a unit and a directory, in two fragments. */
export const BASE_FRAGMENTS: Record<string, Record<string, unknown>> = {
  '00-base.json': {
    ignition: { version: '3.2.0' },
    storage: {
      files: [{ path: '/etc/kindling/release', mode: 420, contents: { source: 'data:,4.18.2%0A' } }],
      directories: [{ path: '/etc/kindling', mode: 493 }],
    },
  },
  '10-kubelet.json': {
    ignition: { version: '3.0.0' },
    systemd: { units: [{ name: 'kubelet.service', enabled: true, contents: '[Unit]\nDescription=kubelet\n[Service]\nExecStart=/usr/bin/kubelet --config=/etc/kubernetes/kubelet.conf\n[Install]\nWantedBy=multi-user.target\n' }] },
  },
};

/** Writes a release folder (release.json + ignition/*.json) and returns its path. */
export async function writeReleaseFolder(dir: string, manifest: object = RELEASE_MANIFEST, fragments = BASE_FRAGMENTS): Promise<string> {
  await mkdir(join(dir, 'ignition'), { recursive: true });
  await writeFile(join(dir, 'release.json'), JSON.stringify(manifest));
  for (const [name, config] of Object.entries(fragments)) await writeFile(join(dir, 'ignition', name), JSON.stringify(config));
  return dir;
}

/** Collects a logger's lines (JSON strings) in memory. */
export function memoryDestination(): { lines: string[]; write: (line: string) => void } {
  const lines: string[] = [];
  return { lines, write: (line: string) => void lines.push(line) };
}

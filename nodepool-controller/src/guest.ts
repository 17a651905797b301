/**
 * The guest control plane's version: `/version` of the guest apiserver, reached through the CAPI convention
 * Secret `<cluster>-kubeconfig`. One client per cluster (rebuilt when the Secret changes), one request in flight
 * per cluster, and the answer cached briefly, so a thousand pools of one cluster ask once.
 */
import * as k8s from '@kubernetes/client-node';
import { SECRET_KEYS, kubeconfigSecretName } from '../../api/src/keys.js';
import { realClock, type Clock } from '../../support/src/timers.js';
import { parseVersion, type Version } from './release.js';

export interface ControlPlaneVersions {
  /** Throws when the guest apiserver cannot be reached or its answer understood. */
  versionOf(namespace: string, cluster: string): Promise<Version>;
}

export interface GuestVersionOptions {
  /** Reads the kubeconfig Secret from the management cluster. */
  readSecret: (namespace: string, name: string) => Promise<k8s.V1Secret>;
  ttlMs?: number;
  clock?: Clock;
}

interface Entry {
  resourceVersion: string;
  api: k8s.VersionApi;
  version?: { value: Version; at: number };
  inFlight?: Promise<Version>;
}

export function createGuestVersions(opts: GuestVersionOptions): ControlPlaneVersions {
  const clock = opts.clock ?? realClock;
  const ttlMs = opts.ttlMs ?? 30_000;
  const entries = new Map<string, Entry>();

  async function clientFor(namespace: string, cluster: string): Promise<Entry> {
    const key = `${namespace}/${cluster}`;
    const cached = entries.get(key);
    if (cached) return cached;
    const secret = await opts.readSecret(namespace, kubeconfigSecretName(cluster));
    const text = Buffer.from(secret.data?.[SECRET_KEYS.kubeconfig] ?? '', 'base64').toString('utf8');
    if (text === '') throw new Error(`Secret ${kubeconfigSecretName(cluster)} has no ${SECRET_KEYS.kubeconfig} key`);
    const kc = new k8s.KubeConfig();
    kc.loadFromString(text);
    const entry: Entry = { resourceVersion: secret.metadata?.resourceVersion ?? '', api: kc.makeApiClient(k8s.VersionApi) };
    entries.set(key, entry);
    return entry;
  }

  async function fetchVersion(key: string, entry: Entry): Promise<Version> {
    try {
      const info = await entry.api.getCode();
      const version = parseVersion(info.gitVersion);
      if (!version) throw new Error(`the guest apiserver reports version "${info.gitVersion}"`);
      entry.version = { value: version, at: clock.now() };
      return version;
    } catch (err) {
      // A broken client (rotated credentials, moved endpoint) is rebuilt from the Secret next time.
      entries.delete(key);
      throw err;
    } finally {
      entry.inFlight = undefined;
    }
  }

  return {
    async versionOf(namespace: string, cluster: string): Promise<Version> {
      const key = `${namespace}/${cluster}`;
      const entry = await clientFor(namespace, cluster);
      if (entry.version && clock.now() - entry.version.at < ttlMs) return entry.version.value;
      entry.inFlight ??= fetchVersion(key, entry);
      return entry.inFlight;
    },
  };
}

/**
 * The guest clusters, reached through the CAPI convention Secret `<cluster>-kubeconfig`: one KubeConfig per
 * cluster (rebuilt after an error, so rotated credentials or a moved endpoint are picked up), shared by the
 * control-plane version check and the Node propagation. `/version` is cached briefly with one request in
 * flight per cluster, so a thousand pools of one cluster ask once.
 */
import * as k8s from '#k8s';
import { createGuestKubeConfigs, type GuestKubeConfigs, type ReadSecret } from '../../support/src/guest-kubeconfigs.js';
import { realClock, type Clock } from '../../support/src/timers.js';
import { parseVersion, type Version } from './release.js';

export interface ControlPlaneVersions {
  /** Throws when the guest apiserver cannot be reached or its answer understood. */
  versionOf(namespace: string, cluster: string): Promise<Version>;
}

export interface GuestVersionOptions {
  readSecret?: ReadSecret;
  /** Shared with the other users of the guest clusters; made from readSecret when absent. */
  kubeConfigs?: GuestKubeConfigs;
  ttlMs?: number;
  clock?: Clock;
}

interface Entry {
  version?: { value: Version; at: number };
  inFlight?: Promise<Version>;
}

export function createGuestVersions(opts: GuestVersionOptions): ControlPlaneVersions {
  const clock = opts.clock ?? realClock;
  const ttlMs = opts.ttlMs ?? 30_000;
  const kubeConfigs =
    opts.kubeConfigs ??
    createGuestKubeConfigs(
      opts.readSecret ?? (() => Promise.reject(new Error('no way to read the kubeconfig Secret'))),
    );
  const entries = new Map<string, Entry>();

  async function fetchVersion(namespace: string, cluster: string, entry: Entry): Promise<Version> {
    try {
      const api = (await kubeConfigs.get(namespace, cluster)).makeApiClient(k8s.VersionApi);
      const info = await api.getCode();
      const version = parseVersion(info.gitVersion);
      if (!version) throw new Error(`the guest apiserver reports version "${info.gitVersion}"`);
      entry.version = { value: version, at: clock.now() };
      return version;
    } catch (err) {
      kubeConfigs.forget(namespace, cluster);
      throw err;
    } finally {
      entry.inFlight = undefined;
    }
  }

  return {
    async versionOf(namespace: string, cluster: string): Promise<Version> {
      const key = `${namespace}/${cluster}`;
      let entry = entries.get(key);
      if (!entry) {
        entry = {};
        entries.set(key, entry);
      }
      if (entry.version && clock.now() - entry.version.at < ttlMs) return entry.version.value;
      entry.inFlight ??= fetchVersion(namespace, cluster, entry);
      return entry.inFlight;
    },
  };
}

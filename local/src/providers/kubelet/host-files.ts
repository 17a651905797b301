/** What a host's kubelet reads from the host root: its bootstrap kubeconfig, its configuration and the release file. */
import * as k8s from '#k8s';
import { HOST_PATHS } from '../../../../api/src/host-paths.js';

export interface BootstrapMaterial {
  server: string;
  caPem: string;
  token: string;
}

/** The cluster and token of a bootstrap kubeconfig; `caPem` stands in when it carries no CA data. */
export function parseBootstrapKubeconfig(yaml: string, caPem?: string): BootstrapMaterial {
  const kc = new k8s.KubeConfig();
  try {
    kc.loadFromString(yaml);
  } catch (err) {
    throw new Error(`${HOST_PATHS.bootstrapKubeconfig} is not a kubeconfig: ${(err as Error).message}`, { cause: err });
  }
  const cluster = kc.getCurrentCluster();
  const user = kc.getCurrentUser();
  if (!cluster?.server) throw new Error(`${HOST_PATHS.bootstrapKubeconfig} names no cluster server`);
  if (!user?.token) throw new Error(`${HOST_PATHS.bootstrapKubeconfig} holds no bootstrap token`);
  const ca = cluster.caData ? Buffer.from(cluster.caData, 'base64').toString() : caPem;
  if (!ca)
    throw new Error(
      `${HOST_PATHS.bootstrapKubeconfig} has no certificate-authority-data and ${HOST_PATHS.guestCa} is missing`,
    );
  return { server: cluster.server, caPem: ca, token: user.token };
}

/** The registration taints of a KubeletConfiguration (JSON). */
export function parseKubeletConfig(json: string): { registerWithTaints: k8s.V1Taint[] } {
  let doc: unknown;
  try {
    doc = JSON.parse(json);
  } catch (err) {
    throw new Error(`${HOST_PATHS.kubeletConfig} is not JSON: ${(err as Error).message}`, { cause: err });
  }
  const config = doc as { kind?: unknown; registerWithTaints?: unknown };
  if (typeof doc !== 'object' || doc === null || config.kind !== 'KubeletConfiguration')
    throw new Error(`${HOST_PATHS.kubeletConfig} is not a KubeletConfiguration`);
  const taints = Array.isArray(config.registerWithTaints) ? (config.registerWithTaints as k8s.V1Taint[]) : [];
  return { registerWithTaints: taints.filter((t) => typeof t.key === 'string' && typeof t.effect === 'string') };
}

/**
 * Why the kubelet would refuse to start with this configuration, or undefined when it would start: not JSON,
 * not a KubeletConfiguration, or a value the kubelet's own validation rejects (the checks below carry its
 * messages, from k8s.io/kubernetes pkg/kubelet/apis/config/validation). A host whose kubelet.conf is refused
 * has no running kubelet: its Node stops being Ready (the simulated kubelet reports that, see Kubelet).
 */
export function kubeletConfigProblem(json: string | undefined): string | undefined {
  if (json === undefined) return `${HOST_PATHS.kubeletConfig} is missing`;
  try {
    parseKubeletConfig(json);
  } catch (err) {
    return (err as Error).message;
  }
  const config = JSON.parse(json) as Record<string, unknown>;
  const rules = Object.entries(KUBELET_RULES).filter(([field]) => config[field] !== undefined);
  const notNumbers = rules.filter(([field]) => typeof config[field] !== 'number').map(([field]) => field);
  if (notNumbers.length > 0)
    return `failed to decode ${HOST_PATHS.kubeletConfig}: ${notNumbers.join(', ')} must be a number`;
  const errors = rules
    .map(([field, rule]) => rule(config[field] as number))
    .filter((e): e is string => e !== undefined);
  return errors.length > 0 ? `invalid configuration: ${errors.join(', ')}` : undefined;
}

/** Numeric fields the kubelet validates, with its own messages. */
const KUBELET_RULES: Record<string, (v: number) => string | undefined> = {
  maxPods: (v) => (v < 0 ? `maxPods (--max-pods) ${v} must not be a negative number` : undefined),
  healthzPort: (v) =>
    v !== 0 && !(v >= 1 && v <= 65535)
      ? `healthzPort (--healthz-port) ${v} must be between 1 and 65535, inclusive`
      : undefined,
  imageGCHighThresholdPercent: (v) =>
    !(v >= 0 && v <= 100)
      ? `imageGCHighThresholdPercent (--image-gc-high-threshold) ${v} must be between 0 and 100, inclusive`
      : undefined,
};

export interface ReleaseInfo {
  kubeletVersion?: string;
  osImage?: string;
}

/** The kubelet's version and OS image from the release file; nothing when it is missing or unreadable. */
export function parseReleaseInfo(json: string | undefined): ReleaseInfo {
  if (json === undefined) return {};
  try {
    const r = JSON.parse(json) as Record<string, unknown>;
    const str = (v: unknown): string | undefined => (typeof v === 'string' && v !== '' ? v : undefined);
    return { kubeletVersion: str(r.kubeletVersion), osImage: str(r.osImage) };
  } catch {
    return {};
  }
}

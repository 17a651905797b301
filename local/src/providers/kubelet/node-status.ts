/** The Node a host's kubelet registers, and the status it reports on it after each look at the host root. */
import type * as k8s from '#k8s';
import { LABELS } from '../../../../api/src/keys.js';
import { SIMULATION } from '../../../../test/bed/src/keys.js';
import type { ReleaseInfo } from './host-files.js';

/** What the host is, as the machine and its cloud metadata tell its kubelet. */
export interface KubeletSpec {
  /** The host's root folder. */
  root: string;
  /** The host's hostname: its Node's name. */
  nodeName: string;
  providerID: string;
  /** The zone, when the machine has one (topology.kubernetes.io/zone). */
  zone?: string;
  /** Taints to register with (the Machine's spec.taints), besides the kubelet config's registerWithTaints. */
  taints: k8s.V1Taint[];
}

/** Value of SIMULATION.hostDown the kubelet writes while it rejects its config (tests write "true" for a
 * dead host: the kubelet never removes that one). */
export const KUBELET_CONFIG_REJECTED = 'kubelet-config-rejected';
/** Reason of the Ready=False condition the kubelet reports while it rejects its config. */
export const KUBELET_CONFIG_INVALID = 'KubeletConfigInvalid';

/** What the kubelet reports in its Node's status after each look at the host root. */
export interface HostStatus {
  release: ReleaseInfo;
  /** This boot's ID (HOST_PATHS.bootId), when the host has one. */
  bootId?: string;
  /** Why the kubelet config is refused (kubeletConfigProblem). */
  configProblem?: string;
}

/**
 * The Node patches that report a host's status: the annotation first (so KWOK stops marking the Node Ready
 * before the status says it is not), then nodeInfo (boot ID, versions) and, while the config is refused,
 * Ready=False, in one status patch: no reader sees this boot's ID with a Ready left from before.
 * `annotation`: what SIMULATION.hostDown is now.
 */
export function hostStatusPatches(
  status: HostStatus,
  annotation: string | undefined,
  now: Date,
): { metadata?: object; status: object } {
  const metadata = hostDownPatch(status.configProblem !== undefined, annotation);
  const nodeInfo: Record<string, string> = {};
  if (status.bootId) nodeInfo.bootID = status.bootId;
  if (status.release.kubeletVersion) nodeInfo.kubeletVersion = status.release.kubeletVersion;
  if (status.release.osImage) nodeInfo.osImage = status.release.osImage;
  const conditions =
    status.configProblem === undefined
      ? undefined
      : [
          {
            type: 'Ready',
            status: 'False',
            reason: KUBELET_CONFIG_INVALID,
            message: `kubelet cannot start: ${status.configProblem}`,
            lastHeartbeatTime: now,
            lastTransitionTime: now,
          },
        ];
  return { ...(metadata ? { metadata } : {}), status: { nodeInfo, ...(conditions ? { conditions } : {}) } };
}

/** Sets the annotation while the config is refused (unless a test put "true" there), removes only its own. */
function hostDownPatch(rejected: boolean, annotation: string | undefined): object | undefined {
  if (rejected && annotation === undefined) return { annotations: { [SIMULATION.hostDown]: KUBELET_CONFIG_REJECTED } };
  if (!rejected && annotation === KUBELET_CONFIG_REJECTED) return { annotations: { [SIMULATION.hostDown]: null } };
  return undefined;
}

/** The Node a kubelet registers: labels it may set under NodeRestriction, its providerID, registration taints and version. */
export function registrationNode(
  spec: KubeletSpec,
  opts: { registerWithTaints: k8s.V1Taint[]; release: ReleaseInfo },
): k8s.V1Node {
  const labels: Record<string, string> = {
    'kubernetes.io/hostname': spec.nodeName,
    'kubernetes.io/os': 'linux',
    [SIMULATION.hostLabel]: 'local',
  };
  if (spec.zone) labels[LABELS.zone] = spec.zone;
  const taints = new Map<string, k8s.V1Taint>();
  for (const t of [...opts.registerWithTaints, ...spec.taints])
    taints.set(`${t.key}:${t.effect}`, { key: t.key, value: t.value, effect: t.effect });
  // Empty fields are KWOK's to fill; the version and OS image are the release's, as a real kubelet's would be.
  const nodeInfo = {
    architecture: '',
    bootID: '',
    containerRuntimeVersion: '',
    kernelVersion: '',
    kubeProxyVersion: '',
    machineID: '',
    operatingSystem: 'linux',
    systemUUID: '',
  };
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name: spec.nodeName, labels },
    spec: { providerID: spec.providerID, taints: [...taints.values()] },
    status: {
      nodeInfo: { ...nodeInfo, kubeletVersion: opts.release.kubeletVersion ?? '', osImage: opts.release.osImage ?? '' },
    },
  };
}

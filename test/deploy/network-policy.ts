/**
 * Whether rendered NetworkPolicies let a connection in, by the NetworkPolicy API's ingress rules: a pod no
 * policy selects accepts everything; a selected pod accepts what any selecting policy's rule admits; a rule
 * admits when one of its peers matches the source (namespace and pod selector in one peer: both) and one of
 * its ports the destination (a named port: the target container's port of that name). The test bed runs no
 * network plugin, so this is how the manifests test asks "who reaches this port" of the policies it renders.
 * ipBlock peers are refused rather than guessed at: the base has none.
 */
import type * as k8s from '#k8s';

type Labels = Record<string, string>;

/** A label selector in its wire form. */
interface Selector {
  matchLabels?: Labels;
  matchExpressions?: { key: string; operator: 'In' | 'NotIn' | 'Exists' | 'DoesNotExist'; values?: string[] }[];
}

interface Peer {
  namespaceSelector?: Selector;
  podSelector?: Selector;
  ipBlock?: unknown;
}

interface IngressRule {
  from?: Peer[];
  ports?: { protocol?: string; port?: number | string }[];
}

/** A NetworkPolicy as parsed from YAML: `from`, where the client's typed model says `_from`. */
export interface NetworkPolicy extends k8s.KubernetesObject {
  spec: { podSelector: Selector; policyTypes?: string[]; ingress?: IngressRule[] };
}

/** A pod of the cluster by its namespace (name and labels) and its own labels. */
export interface PodRef {
  namespace: string;
  namespaceLabels: Labels;
  labels: Labels;
}

/** Where a connection comes from: a pod, or an address outside the cluster (a booting host). */
export type Source = PodRef | 'outside';

/** The pod connected to, with its containers' ports (to resolve named ports). */
export interface Target extends PodRef {
  ports: k8s.V1ContainerPort[];
}

function selects(selector: Selector, labels: Labels): boolean {
  const matched = Object.entries(selector.matchLabels ?? {}).every(([k, v]) => labels[k] === v);
  return (
    matched &&
    (selector.matchExpressions ?? []).every(({ key, operator, values = [] }) => {
      const has = key in labels;
      if (operator === 'Exists') return has;
      if (operator === 'DoesNotExist') return !has;
      const within = has && values.includes(labels[key] ?? '');
      return operator === 'In' ? within : !within;
    })
  );
}

function peerMatches(peer: Peer, policyNamespace: string, source: Source): boolean {
  if (peer.ipBlock !== undefined) throw new Error('ipBlock peers are not modelled: extend network-policy.ts');
  if (source === 'outside') return false;
  const namespaceOk = peer.namespaceSelector
    ? selects(peer.namespaceSelector, source.namespaceLabels)
    : source.namespace === policyNamespace;
  return namespaceOk && (peer.podSelector === undefined || selects(peer.podSelector, source.labels));
}

function portMatches(ports: IngressRule['ports'], target: Target, port: number): boolean {
  if (!ports || ports.length === 0) return true;
  return ports.some((p) => {
    if ((p.protocol ?? 'TCP') !== 'TCP') return false;
    if (p.port === undefined) return true;
    const number = typeof p.port === 'number' ? p.port : target.ports.find((c) => c.name === p.port)?.containerPort;
    return number === port;
  });
}

/** The policies of the target's namespace that isolate it for ingress. */
export function selecting(policies: NetworkPolicy[], target: PodRef): NetworkPolicy[] {
  return policies.filter(
    (p) =>
      p.metadata?.namespace === target.namespace &&
      (p.spec.policyTypes ?? ['Ingress']).includes('Ingress') &&
      selects(p.spec.podSelector, target.labels),
  );
}

/** Whether a TCP connection from `source` to `port` of `target` is let in. */
export function admits(policies: NetworkPolicy[], source: Source, target: Target, port: number): boolean {
  const isolating = selecting(policies, target);
  if (isolating.length === 0) return true;
  return isolating.some((policy) =>
    (policy.spec.ingress ?? []).some(
      (rule) =>
        portMatches(rule.ports, target, port) &&
        (!rule.from ||
          rule.from.length === 0 ||
          rule.from.some((peer) => peerMatches(peer, policy.metadata?.namespace ?? '', source))),
    ),
  );
}

/**
 * The pools' infrastructure templates, read for what they report of a node's capacity (status.capacity, Cluster
 * API's opt-in autoscaling-from-zero contract). A template is any provider's kind: its version is the group's
 * preferred one and its resource the kind's lower-case plural, as Cluster API's template kinds are named. The
 * controller reads them from watches (template-cache.ts); `kindling plan` reads them once.
 */
import * as k8s from '#k8s';
import type { ObjectRef } from '../../api/src/nodepool.js';
import type { TemplateCapacity } from './capacity.js';
import { asRefusal, isNotFound } from '../../support/src/errors.js';

export interface InfrastructureTemplates {
  /** The template's status.capacity; undefined when it reports none. Throws when it cannot be read. */
  capacityOf(namespace: string, ref: ObjectRef): Promise<TemplateCapacity | undefined>;
}

/** Why a template cannot be read, in words for the pool's condition: the apiserver's refusal (RBAC) or its absence. */
function unreadable(err: unknown, ref: ObjectRef, namespace: string): Error {
  const key = `${namespace}/${ref.name}`;
  if (isNotFound(err)) return new Error(`${ref.kind} ${key} does not exist`, { cause: err });
  return asRefusal(err, ref.kind, key) ?? new Error(`reading ${ref.kind} ${key} failed`, { cause: err });
}

/** An infrastructure template as far as it is read: what it reports of a node. */
export interface InfrastructureTemplate extends k8s.KubernetesObject {
  status?: { capacity?: TemplateCapacity };
}

/** The template's capacity; undefined when it reports none. */
export function reportedCapacity(template: InfrastructureTemplate): TemplateCapacity | undefined {
  const capacity = template.status?.capacity;
  return capacity && Object.keys(capacity).length > 0 ? capacity : undefined;
}

/** The resource of a template kind: Cluster API's template kinds are named so that it is the lower-case plural. */
export const pluralOf = (ref: ObjectRef): string => `${ref.kind.toLowerCase()}s`;

/** The served version of a template's group, asked of the apiserver once per process (and again after a failure). */
export function preferredVersions(kc: k8s.KubeConfig): (ref: ObjectRef) => Promise<string> {
  const apis = kc.makeApiClient(k8s.ApisApi);
  let preferred: Promise<Map<string, string>> | undefined;
  const versions = (): Promise<Map<string, string>> =>
    (preferred ??= apis.getAPIVersions().then(
      (list) => new Map(list.groups.map((g) => [g.name, g.preferredVersion?.version ?? g.versions[0]?.version ?? ''])),
      (err: unknown) => {
        preferred = undefined;
        throw new Error('failed to list the API groups', { cause: err });
      },
    ));
  return async (ref) => {
    const version = (await versions()).get(ref.apiGroup);
    if (!version) throw new Error(`the API group ${ref.apiGroup} of ${ref.kind} ${ref.name} is not served`);
    return version;
  };
}

/** One GET per call: for `kindling plan`, and for the controller while a template's watch has not listed. */
export function createInfrastructureTemplates(
  kc: k8s.KubeConfig,
  versionOf: (ref: ObjectRef) => Promise<string> = preferredVersions(kc),
): InfrastructureTemplates {
  const custom = kc.makeApiClient(k8s.CustomObjectsApi);
  return {
    async capacityOf(namespace, ref) {
      const version = await versionOf(ref);
      const template = (await custom
        .getNamespacedCustomObject({ group: ref.apiGroup, version, namespace, plural: pluralOf(ref), name: ref.name })
        .catch((err: unknown) => {
          throw unreadable(err, ref, namespace);
        })) as InfrastructureTemplate;
      return reportedCapacity(template);
    },
  };
}

/**
 * The pools' infrastructure templates, read for what they report of a node's capacity (status.capacity, Cluster
 * API's opt-in autoscaling-from-zero contract). A template is any provider's kind: its version is the group's
 * preferred one and its resource the kind's lower-case plural, as Cluster API's template kinds are named.
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

export function createInfrastructureTemplates(kc: k8s.KubeConfig): InfrastructureTemplates {
  const apis = kc.makeApiClient(k8s.ApisApi);
  const custom = kc.makeApiClient(k8s.CustomObjectsApi);
  let preferred: Promise<Map<string, string>> | undefined;
  const versions = (): Promise<Map<string, string>> =>
    (preferred ??= apis.getAPIVersions().then(
      (list) => new Map(list.groups.map((g) => [g.name, g.preferredVersion?.version ?? g.versions[0]?.version ?? ''])),
      (err: unknown) => {
        preferred = undefined;
        throw new Error('failed to list the API groups', { cause: err });
      },
    ));
  return {
    async capacityOf(namespace, ref) {
      const version = (await versions()).get(ref.apiGroup);
      if (!version) throw new Error(`the API group ${ref.apiGroup} of ${ref.kind} ${ref.name} is not served`);
      const plural = `${ref.kind.toLowerCase()}s`;
      const template = (await custom
        .getNamespacedCustomObject({ group: ref.apiGroup, version, namespace, plural, name: ref.name })
        .catch((err: unknown) => {
          throw unreadable(err, ref, namespace);
        })) as { status?: { capacity?: TemplateCapacity } };
      const capacity = template.status?.capacity;
      return capacity && Object.keys(capacity).length > 0 ? capacity : undefined;
    },
  };
}

/**
 * What each ServiceAccount was granted by rendered RBAC, and what it did according to an apiserver audit log,
 * both as `group/resource verb` strings (core group: empty, so `/secrets get`).
 */
import { readFile } from 'node:fs/promises';
import type * as k8s from '#k8s';

export const permission = (group: string, resource: string, verb: string): string => `${group}/${resource} ${verb}`;

/** Every (group, resource, verb) the rendered Roles and ClusterRoles grant the ServiceAccount through its bindings. */
export function granted(objects: k8s.KubernetesObject[], namespace: string, serviceAccount: string): Set<string> {
  const bindings = (objects as k8s.V1RoleBinding[]).filter(
    (o) =>
      ['RoleBinding', 'ClusterRoleBinding'].includes(o.kind ?? '') &&
      o.subjects?.some((s) => s.kind === 'ServiceAccount' && s.name === serviceAccount && s.namespace === namespace),
  );
  const roles = bindings.map((b) =>
    (objects as k8s.V1Role[]).find((r) => r.kind === b.roleRef.kind && r.metadata?.name === b.roleRef.name),
  );
  const rules = roles.flatMap((r) => r?.rules ?? []);
  return new Set(
    rules.flatMap((rule) =>
      (rule.apiGroups ?? []).flatMap((g) =>
        (rule.resources ?? []).flatMap((res) => rule.verbs.map((v) => permission(g, res, v))),
      ),
    ),
  );
}

interface AuditEvent {
  verb: string;
  requestURI: string;
  user: { username: string };
  objectRef?: { apiGroup?: string; resource?: string; subresource?: string };
  responseStatus?: { code?: number };
}

function groupResourceOf(e: AuditEvent): [string, string] {
  const { apiGroup = '', resource = '', subresource } = e.objectRef ?? {};
  return [apiGroup, subresource ? `${resource}/${subresource}` : resource];
}

export interface Usage {
  /** Permissions exercised by at least one request. */
  used: Set<string>;
  /** Requests answered 403, as `verb URI`, each once. */
  denied: string[];
}

/** The requests of one user in an audit log (JSON lines). A server-side apply that created its object (201) also counts as create. */
export async function usageOf(auditLog: string, username: string): Promise<Usage> {
  const events = (await readFile(auditLog, 'utf8'))
    .split('\n')
    .filter((line) => line.includes(username))
    .map((line) => JSON.parse(line) as AuditEvent)
    .filter((e) => e.user.username === username);
  const used = new Set<string>();
  const denied = new Set<string>();
  for (const e of events) {
    const code = e.responseStatus?.code;
    const [group, resource] = groupResourceOf(e);
    used.add(permission(group, resource, e.verb));
    if (e.verb === 'patch' && code === 201) used.add(permission(group, resource, 'create'));
    if (code === 403) denied.add(`${e.verb} ${e.requestURI}`);
  }
  return { used, denied: [...denied].sort() };
}

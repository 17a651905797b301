/**
 * The Cluster API Runtime SDK contract Kindling serves (hooks.runtime.cluster.x-k8s.io/v1alpha1, as in
 * Cluster API v1.14): discovery and the three in-place update hooks, their paths and their JSON. The
 * manager POSTs a request to `/<group>/<version>/<hook in lower case>[/<handler name>]` (no name for
 * discovery) and reads a 200 with the response; any other status is a failed call. A Go `[]byte` (a
 * patch) travels as base64, a RawExtension (an infrastructure/bootstrap object) as the object itself.
 */
import { RUNTIME_API_VERSION, type ExtensionConfig } from '../../../api/src/capi.js';
import { LABELS } from '../../../api/src/keys.js';

const HOOKS_GROUP = 'hooks.runtime.cluster.x-k8s.io';
const HOOKS_VERSION = 'v1alpha1';
export const HOOKS_API_VERSION = `${HOOKS_GROUP}/${HOOKS_VERSION}`;

export type HookName = 'Discovery' | 'CanUpdateMachineSet' | 'CanUpdateMachine' | 'UpdateMachine';

/** Where the manager sends a hook's requests. */
export function hookPath(hook: HookName, handler?: string): string {
  const base = `/${HOOKS_GROUP}/${HOOKS_VERSION}/${hook.toLowerCase()}`;
  return handler === undefined ? base : `${base}/${handler.toLowerCase()}`;
}

/** The name of Kindling's handler of a hook: the hook in kebab case (can-update-machine-set). */
const handlerName = (hook: HookName): string => hook.replace(/(?<=[a-z])(?=[A-Z])/g, '-').toLowerCase();

/** Where the manager sends the requests of Kindling's handler of a hook. */
export const handlerPath = (hook: Exclude<HookName, 'Discovery'>): string => hookPath(hook, handlerName(hook));

export interface ExtensionHandler {
  /** A DNS-1123 label; the manager registers it as `<name>.<ExtensionConfig name>`. */
  name: string;
  requestHook: { apiVersion: string; hook: HookName };
  timeoutSeconds: number;
  failurePolicy: 'Fail' | 'Ignore';
}

/**
 * The handlers Kindling serves. failurePolicy Fail on every one: with Ignore, an unreachable extension
 * counts as a Success with no patch, and Cluster API leaves its bootstrap fields out of the comparison, so a
 * user-data change would be "covered" without Kindling ever deciding it.
 */
export const HANDLERS: readonly ExtensionHandler[] = (
  ['CanUpdateMachineSet', 'CanUpdateMachine', 'UpdateMachine'] as const
).map((hook) => ({
  name: handlerName(hook),
  requestHook: { apiVersion: HOOKS_API_VERSION, hook },
  timeoutSeconds: 5,
  failurePolicy: 'Fail',
}));

export type JsonObject = Record<string, unknown>;

export interface JsonPatchOperation {
  op: 'add' | 'remove';
  path: string;
  value?: unknown;
}

export interface Patch {
  patchType: 'JSONPatch' | 'JSONMergePatch';
  /** The patch document, base64 (a Go []byte on the wire). */
  patch: string;
}

export type ResponseStatus = 'Success' | 'Failure';

export interface CommonResponse {
  apiVersion: typeof HOOKS_API_VERSION;
  kind: string;
  status: ResponseStatus;
  message?: string;
}

export interface DiscoveryResponse extends CommonResponse {
  handlers?: ExtensionHandler[];
}

export interface CanUpdateMachineSetResponse extends CommonResponse {
  machineSetPatch?: Patch;
  infrastructureMachineTemplatePatch?: Patch;
  bootstrapConfigTemplatePatch?: Patch;
}

export interface CanUpdateMachineResponse extends CommonResponse {
  machinePatch?: Patch;
  infrastructureMachinePatch?: Patch;
  bootstrapConfigPatch?: Patch;
}

/** Success with retryAfterSeconds > 0: in progress; Success with 0: done; Failure: failed (retried). */
export interface UpdateMachineResponse extends CommonResponse {
  retryAfterSeconds: number;
}

/** A JSON patch as the response carries it, or nothing when there is no operation. */
export function jsonPatch(ops: readonly JsonPatchOperation[]): Patch | undefined {
  if (ops.length === 0) return undefined;
  return { patchType: 'JSONPatch', patch: Buffer.from(JSON.stringify(ops)).toString('base64') };
}

export function response<R extends CommonResponse>(
  kind: string,
  status: ResponseStatus,
  fields: Omit<R, keyof CommonResponse> & { message?: string },
): R {
  return { apiVersion: HOOKS_API_VERSION, kind, status, ...fields } as R;
}

/** The name Kindling's extension is registered under (a DNS-1123 label: handler names get it as a suffix). */
export const EXTENSION_CONFIG_NAME = 'kindling-inplace';

/**
 * Where the Cluster API manager calls the extension: tenant namespaces only, so no other namespace's
 * rollouts wait on it (failurePolicy Fail) and nothing outside them reaches it through Cluster API.
 */
const TENANT_NAMESPACE_SELECTOR = { matchLabels: { [LABELS.tenant]: 'true' } } as const;

/**
 * The ExtensionConfig registering Kindling's extension with the Cluster API manager: at a URL or a Service,
 * trusted through the CA of its serving certificate. Only one extension may serve the in-place hooks.
 */
export function extensionConfig(opts: {
  caPem: string;
  url?: string;
  service?: { namespace: string; name: string; port?: number };
}): ExtensionConfig {
  return {
    apiVersion: RUNTIME_API_VERSION,
    kind: 'ExtensionConfig',
    metadata: { name: EXTENSION_CONFIG_NAME },
    spec: {
      clientConfig: {
        ...(opts.url ? { url: opts.url } : {}),
        ...(opts.service ? { service: opts.service } : {}),
        caBundle: Buffer.from(opts.caPem).toString('base64'),
      },
      namespaceSelector: { matchLabels: { ...TENANT_NAMESPACE_SELECTOR.matchLabels } },
    },
  };
}

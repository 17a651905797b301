/**
 * What `kindling status` checks before it starts its informers: that the management cluster answers and serves
 * every resource it watches. An informer on a resource the apiserver does not serve retries forever, so
 * without this a cluster lacking Cluster API's CRDs (or Kindling's) left the command hanging with no output.
 * Discovery is asked once per API group version, within a bounded time; the verdict is a pure function.
 */
import * as k8s from '#k8s';
import { NODEPOOL_API_VERSION, NODEPOOL_PLURAL } from '../../api/src/nodepool.js';
import { CAPI_API_VERSION } from '../../api/src/capi.js';
import { isNotFound } from '../../support/src/errors.js';

/** How long the command waits for the apiserver's discovery answers. */
const PREFLIGHT_TIMEOUT_MS = 10_000;

interface Needed {
  apiVersion: string;
  resources: readonly string[];
  /** What installs them, for the message. */
  installedBy: string;
}

const STATUS_NEEDS: readonly Needed[] = [
  {
    apiVersion: NODEPOOL_API_VERSION,
    resources: [NODEPOOL_PLURAL],
    installedBy: "Kindling's CRDs (kindling crds | kubectl apply --server-side -f -)",
  },
  {
    apiVersion: CAPI_API_VERSION,
    resources: ['machinedeployments', 'machinesets', 'machines'],
    installedBy: "Cluster API's CRDs (install Cluster API v1.14 or newer in the management cluster)",
  },
];

/** The resources an API group version serves, or 'absent' when the apiserver does not serve it at all. */
export type Served = readonly string[] | 'absent';

/**
 * Why status cannot run against this cluster, or undefined when it can.
 * @param served what discovery answered, by apiVersion
 */
export function preflightProblem(server: string, served: ReadonlyMap<string, Served>): string | undefined {
  const problems = STATUS_NEEDS.flatMap((need) => {
    const has = served.get(need.apiVersion) ?? 'absent';
    const missing = need.resources.filter((r) => has === 'absent' || !has.includes(r));
    return missing.length === 0 ? [] : [`${need.apiVersion} ${missing.join(', ')}: ${need.installedBy}`];
  });
  if (problems.length === 0) return undefined;
  return `the management cluster at ${server} does not serve what status reads; missing:\n  ${problems.join('\n  ')}`;
}

async function servedBy(custom: k8s.CustomObjectsApi, apiVersion: string): Promise<Served> {
  const [group = '', version = ''] = apiVersion.split('/');
  try {
    return (await custom.getAPIResources({ group, version })).resources.map((r) => r.name);
  } catch (err) {
    if (isNotFound(err)) return 'absent';
    throw err;
  }
}

function within<T>(ms: number, work: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not answer within ${ms / 1000} s`)), ms);
  });
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}

/** Throws with a message for a person when the cluster cannot answer or lacks a resource status reads. */
export async function statusPreflight(kc: k8s.KubeConfig, timeoutMs = PREFLIGHT_TIMEOUT_MS): Promise<void> {
  const server = kc.getCurrentCluster()?.server ?? '(no server in the kubeconfig)';
  const custom = kc.makeApiClient(k8s.CustomObjectsApi);
  let answers: Served[];
  try {
    answers = await within(
      timeoutMs,
      Promise.all(STATUS_NEEDS.map((n) => servedBy(custom, n.apiVersion))),
      `the management cluster at ${server}`,
    );
  } catch (err) {
    const reason = err instanceof Error ? err.message : String(err);
    throw new StatusPreflightError(`cannot read the management cluster at ${server}: ${reason}`, { cause: err });
  }
  const problem = preflightProblem(server, new Map(STATUS_NEEDS.map((n, i) => [n.apiVersion, answers[i] ?? 'absent'])));
  if (problem !== undefined) throw new StatusPreflightError(problem);
}

export class StatusPreflightError extends Error {
  override readonly name = 'StatusPreflightError';
}

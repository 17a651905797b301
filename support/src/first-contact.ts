/**
 * A component's first contact with its management cluster. Without it, a component started with a wrong
 * kubeconfig, an apiserver not up yet or a network policy in the way retries inside its informers and says
 * nothing a person can act on. Before anything else starts, it asks the apiserver for its version: it logs
 * where it is going, and on every failure the server address, what went wrong and when it tries again, with
 * backoff, until the cluster answers or the component is shut down.
 */
import * as k8s from '#k8s';
import type { Logger } from './logger.js';
import { statusCode } from './errors.js';
import { makeApiClient } from './kubeconfig.js';

/** How long one attempt waits for an answer. */
const CONTACT_TIMEOUT_MS = 10_000;
const FIRST_DELAY_MS = 1_000;
const MAX_DELAY_MS = 30_000;

/** The wait before attempt `failures + 1`: 1 s, 2 s, 4 s … up to 30 s. */
export function contactDelayMs(failures: number): number {
  return Math.min(MAX_DELAY_MS, FIRST_DELAY_MS * 2 ** Math.max(0, Math.min(failures - 1, 10)));
}

/** What went wrong, in one line a person can act on: the network error's code, or the apiserver's status. */
export function contactError(err: unknown): string {
  const code = statusCode(err);
  if (code === 401) return 'HTTP 401: the apiserver does not accept these credentials';
  if (code === 403) return 'HTTP 403: these credentials may not read /version';
  if (code !== undefined) return `HTTP ${code}`;
  const messages: string[] = [];
  for (let e: unknown = err; e instanceof Error; e = e.cause) messages.push(e.message);
  return [...new Set(messages.filter((m) => m !== ''))].join(': ') || String(err);
}

export interface FirstContactOptions {
  kubeConfig: k8s.KubeConfig;
  log: Logger;
  /** Resolves when the component is shutting down: the attempts stop. */
  stopped: Promise<unknown>;
  /** Asks the cluster once; resolves with its version. Default: GET /version. */
  probe?: () => Promise<string>;
  sleep?: (ms: number) => Promise<void>;
}

function versionProbe(kc: k8s.KubeConfig): () => Promise<string> {
  // The deadline aborts the request, so an apiserver that never answers leaves no socket behind per attempt.
  const api = makeApiClient(kc, k8s.VersionApi, CONTACT_TIMEOUT_MS);
  return async () => {
    try {
      return (await api.getCode()).gitVersion;
    } catch (err) {
      if ((err as Error).name !== 'TimeoutError') throw err;
      throw new Error(`no answer within ${CONTACT_TIMEOUT_MS / 1000} s`, { cause: err });
    }
  };
}

// Not unref'd: while the cluster is unreachable, this wait is all that keeps the component alive.
const defaultSleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Resolves true once the cluster answered, false when the component was stopped first. */
export async function awaitFirstContact(opts: FirstContactOptions): Promise<boolean> {
  const server = opts.kubeConfig.getCurrentCluster()?.server ?? '(no server in the kubeconfig)';
  const probe = opts.probe ?? versionProbe(opts.kubeConfig);
  const sleep = opts.sleep ?? defaultSleep;
  let stopped = false;
  void opts.stopped.then(() => (stopped = true));
  opts.log.info({ server }, `Contacting the management cluster at ${server}`);
  for (let failures = 1; !stopped; failures++) {
    try {
      const version = await probe();
      opts.log.info({ server, version }, `Reached the management cluster at ${server} (Kubernetes ${version})`);
      return true;
    } catch (err) {
      const retryInMs = contactDelayMs(failures);
      const error = contactError(err);
      opts.log.warn(
        { server, error, attempt: failures, retryInMs },
        `Cannot reach the management cluster at ${server}: ${error}; retrying in ${retryInMs / 1000} s`,
      );
      await Promise.race([sleep(retryInMs), opts.stopped]);
    }
  }
  return false;
}

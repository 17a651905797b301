/**
 * Join material (Flow 2, joining): what a booted host needs to become a Node of *its* guest cluster — the
 * guest apiserver URL, the guest CA and a bootstrap kubeconfig holding a bootstrap token of its pool. The
 * token is minted together with the pool's Ignition token (same owner, same expiry, deleted with it), into
 * the guest's kube-system and into the token Secret. The material is per pool and per token, so it never
 * enters the shared, cached payload: it is spliced into the served bytes (payload/store.ts, `joinAt`).
 */
import { randomInt } from 'node:crypto';
import * as k8s from '#k8s';
import { BOOTSTRAP_GROUP, FIELD_MANAGERS, LABELS, bootstrapPoolGroup } from '../../api/src/keys.js';
import { createApplier, type Applier } from '../../support/src/apply.js';
import { isNotFound } from '../../support/src/errors.js';
import { guestEndpoint, type GuestKubeConfigs } from '../../support/src/guest-kubeconfigs.js';
import type { JoinMaterial } from './join-files.js';

export { bootstrapKubeconfig, joinFileBytes } from './join-files.js';

const TOKEN_ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';
const randomString = (length: number): string =>
  Array.from({ length }, () => TOKEN_ALPHABET[randomInt(TOKEN_ALPHABET.length)]).join('');

/** A bootstrap token in the format the guest apiserver's bootstrap authenticator takes (`[a-z0-9]{6}.[a-z0-9]{16}`). */
export function newBootstrapToken(): string {
  return `${randomString(6)}.${randomString(16)}`;
}

export const bootstrapTokenId = (token: string): string => token.split('.')[0] ?? '';
export const bootstrapSecretName = (tokenId: string): string => `bootstrap-token-${tokenId}`;

const iso = (ms: number): string => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');

export interface BootstrapSecretOptions {
  token: string;
  /** The pool's namespace and name in the management cluster. */
  namespace: string;
  pool: string;
  /** The paired Ignition token's expiry: the guest's tokencleaner deletes the Secret then. */
  expiresAtMs: number;
}

/** The guest's `bootstrap.kubernetes.io/token` Secret of one token: authentication only, the pool's groups. */
export function desiredBootstrapSecret(opts: BootstrapSecretOptions): k8s.V1Secret {
  const [id = '', secret = ''] = opts.token.split('.');
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    type: 'bootstrap.kubernetes.io/token',
    metadata: { name: bootstrapSecretName(id), namespace: 'kube-system', labels: { [LABELS.nodePool]: opts.pool } },
    stringData: {
      'token-id': id,
      'token-secret': secret,
      expiration: iso(opts.expiresAtMs),
      'usage-bootstrap-authentication': 'true',
      'auth-extra-groups': [BOOTSTRAP_GROUP, bootstrapPoolGroup(opts.namespace, opts.pool)].join(','),
      description: `Kindling bootstrap token of NodePool ${opts.namespace}/${opts.pool}`,
    },
  };
}

interface MintRequest {
  namespace: string;
  cluster: string;
  pool: string;
  expiresAtMs: number;
}

/**
 * The guest's `<cluster>-kubeconfig` Secret gave no config (missing, unreadable or refused; the cause says which):
 * nothing was sent to the guest. A caller that gives up on a gone cluster tells that apart from a guest that failed.
 */
export class GuestKubeconfigError extends Error {
  override readonly name = 'GuestKubeconfigError';
}

/** The first GuestKubeconfigError in an error's cause chain. */
export function findGuestKubeconfigError(err: unknown): GuestKubeconfigError | undefined {
  for (let e: unknown = err; e instanceof Error; e = e.cause) if (e instanceof GuestKubeconfigError) return e;
  return undefined;
}

/** Writes and deletes bootstrap tokens in guest clusters. */
export interface GuestJoin {
  /** Mints a bootstrap token into the guest and returns the join material around it. */
  mint(req: MintRequest): Promise<JoinMaterial>;
  /** Deletes bootstrap tokens from the guest (gone already: fine). */
  revoke(req: { namespace: string; cluster: string; tokens: string[] }): Promise<void>;
}

/**
 * How long a write of a bootstrap token into a guest may take: the guest is the tenant's, and a mint waits for it
 * on one of the leader's workers, which every tenant's first tokens share. A bootstrap token is a small Secret.
 */
const GUEST_WRITE_MS = 10_000;

export function createGuestJoin(kubeConfigs: GuestKubeConfigs): GuestJoin {
  // One applier per guest config (a config read again after an error gets a new one): an applier learns the
  // guest's API resources on its first write, so a new one per mint asked the guest's discovery every time.
  const appliers = new WeakMap<k8s.KubeConfig, Applier>();
  const applierOf = (kc: k8s.KubeConfig): Applier => {
    let applier = appliers.get(kc);
    if (!applier) appliers.set(kc, (applier = createApplier(kc, FIELD_MANAGERS.ignitionServer, GUEST_WRITE_MS)));
    return applier;
  };
  const withGuest = async <T>(
    namespace: string,
    cluster: string,
    what: string,
    fn: (kc: k8s.KubeConfig) => Promise<T>,
  ): Promise<T> => {
    const failed = `failed to ${what} in guest cluster ${namespace}/${cluster}`;
    let kc: k8s.KubeConfig;
    try {
      kc = await kubeConfigs.get(namespace, cluster);
    } catch (err) {
      kubeConfigs.forget(namespace, cluster);
      throw new GuestKubeconfigError(`${failed}: its kubeconfig could not be had`, { cause: err });
    }
    try {
      return await fn(kc);
    } catch (err) {
      kubeConfigs.forget(namespace, cluster);
      throw new Error(failed, { cause: err });
    }
  };
  return {
    mint: (req) =>
      withGuest(req.namespace, req.cluster, 'mint a bootstrap token', async (kc) => {
        const { server, caPem } = guestEndpoint(kc);
        const bootstrapToken = newBootstrapToken();
        await applierOf(kc).apply(
          desiredBootstrapSecret({
            token: bootstrapToken,
            namespace: req.namespace,
            pool: req.pool,
            expiresAtMs: req.expiresAtMs,
          }),
        );
        return { server, caPem, bootstrapToken };
      }),
    revoke: (req) =>
      withGuest(req.namespace, req.cluster, 'delete bootstrap tokens', async (kc) => {
        const core = kc.makeApiClient(k8s.CoreV1Api);
        for (const token of req.tokens) {
          await core
            .deleteNamespacedSecret({ name: bootstrapSecretName(bootstrapTokenId(token)), namespace: 'kube-system' })
            .catch((err: unknown) => {
              if (!isNotFound(err)) throw err;
            });
        }
      }),
  };
}

/**
 * The token Secret and the user-data Secret of a pool at a config hash: pure functions of the pool, the hash
 * inputs and the controller's configuration. The token itself is minted (and rotated) by the ignition server,
 * which owns SECRET_KEYS.token; the controller owns the keys below and never touches that one.
 */
import type { V1OwnerReference, V1Secret } from '#k8s';
import {
  ANNOTATIONS,
  IGNITION_HEADERS,
  LABELS,
  SECRET_KEYS,
  tokenSecretName,
  userDataSecretName,
} from '../../api/src/keys.js';
import type { NodePool } from '../../api/src/nodepool.js';
import type { HashInputs } from './hash.js';

/** The Ignition spec version of the stub (accepted by every Ignition 2.x client in the field). */
const STUB_IGNITION_VERSION = '3.2.0';

const b64 = (text: string): string => Buffer.from(text, 'utf8').toString('base64');

function poolKey(pool: NodePool): string {
  return `${pool.metadata.namespace ?? ''}/${pool.metadata.name}`;
}

/** The pool as the controlling owner: children are garbage-collected with it even if the finalizer is bypassed. */
export function ownerReference(pool: NodePool): V1OwnerReference {
  return {
    apiVersion: pool.apiVersion,
    kind: pool.kind,
    name: pool.metadata.name,
    uid: pool.metadata.uid ?? '',
    controller: true,
    blockOwnerDeletion: true,
  };
}

export interface TokenSecretOptions {
  hash: string;
  inputs: HashInputs;
  /** RFC3339: set once the pool's hash moved on (ANNOTATIONS.tokenExpiresAt). */
  expiresAt?: string;
}

export function desiredTokenSecret(pool: NodePool, opts: TokenSecretOptions): V1Secret {
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    type: 'Opaque',
    metadata: {
      name: tokenSecretName(pool.metadata.name, opts.hash),
      namespace: pool.metadata.namespace,
      // The cluster label tells the ignition server which guest cluster the pool's bootstrap tokens go to.
      labels: {
        [LABELS.nodePool]: pool.metadata.name,
        [LABELS.tokenSecret]: 'true',
        [LABELS.configHash]: opts.hash,
        [LABELS.capiClusterName]: pool.spec.clusterName,
      },
      ...(opts.expiresAt === undefined ? {} : { annotations: { [ANNOTATIONS.tokenExpiresAt]: opts.expiresAt } }),
      ownerReferences: [ownerReference(pool)],
    },
    data: {
      [SECRET_KEYS.pool]: b64(poolKey(pool)),
      [SECRET_KEYS.release]: b64(opts.inputs.release),
      [SECRET_KEYS.config]: b64(opts.inputs.config),
    },
  };
}

/** Where hosts fetch their payload, and the CA that signs that endpoint's serving certificate. */
export interface IgnitionEndpoint {
  /** host[:port] of the ignition server. */
  endpoint: string;
  caPem: string;
}

export interface StubOptions extends IgnitionEndpoint {
  pool: NodePool;
  hash: string;
  token: string;
}

/** The Ignition 3.x stub of Flow 1 step 3 (docs/architecture.md): merge the payload served by the ignition server. */
export function ignitionStub(opts: StubOptions): Record<string, unknown> {
  return {
    ignition: {
      version: STUB_IGNITION_VERSION,
      config: {
        merge: [
          {
            source: `https://${opts.endpoint}/ignition`,
            httpHeaders: [
              { name: 'Authorization', value: `Bearer ${opts.token}` },
              { name: IGNITION_HEADERS.nodePool, value: poolKey(opts.pool) },
              { name: IGNITION_HEADERS.targetConfigVersionHash, value: opts.hash },
            ],
          },
        ],
      },
      security: {
        tls: { certificateAuthorities: [{ source: `data:text/plain;charset=utf-8;base64,${b64(opts.caPem)}` }] },
      },
    },
  };
}

export function desiredUserDataSecret(opts: StubOptions): V1Secret {
  const { pool, hash } = opts;
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    type: 'Opaque',
    metadata: {
      name: userDataSecretName(pool.metadata.name, hash),
      namespace: pool.metadata.namespace,
      labels: { [LABELS.nodePool]: pool.metadata.name, [LABELS.userDataSecret]: 'true', [LABELS.configHash]: hash },
      ownerReferences: [ownerReference(pool)],
    },
    data: { [SECRET_KEYS.value]: b64(JSON.stringify(ignitionStub(opts))), [SECRET_KEYS.format]: b64('ignition') },
  };
}

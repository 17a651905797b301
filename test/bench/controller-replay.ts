/**
 * The NodePool controller benchmark's replays: the controller's window played again by a plain client into a
 * namespace of its own, a fixed number of pools at a time, each pool created as the benchmark creates it, then
 * the very server-side applies the controller sent for it, in order. No informers, no waiting.
 *
 * With `server`, the replay also carries the ignition server's writes of each pool, where they fall in a pool's
 * convergence (after its token Secret, before its status): the guest bootstrap token applied into the guest,
 * then one merge patch of the token Secret with the token, the join material, the issue time and the payload
 * verdict, guarded by the resourceVersion the apply returned, as the server's are. That is the server at its
 * least: its mint and verdict in one patch (a generation slower than its first mint makes them two). No pool
 * converges without these writes, so this is the floor of the whole system, beside the controller's own.
 */
import * as k8s from '#k8s';
import { ANNOTATIONS, LABELS, SECRET_KEYS } from '../../api/src/keys.js';
import type { NodePool } from '../../api/src/nodepool.js';
import { createApplier, type Applier } from '../../support/src/apply.js';
import { desiredBootstrapSecret, newBootstrapToken } from '../../ignition-server/src/join.js';
import type { Sent } from './controller-process.js';
import { inFlight } from './in-flight.js';

/** The ignition server's writes, as they were made in the window. */
export interface ServerWrites {
  /** The guest's kubeconfig: the bootstrap tokens go there. */
  guest: k8s.KubeConfig;
  /** Each pool's token Secret as the window left it (by pool name): its minted data and annotations. */
  tokenSecrets: Map<string, k8s.V1Secret>;
}

export interface ReplayPlan {
  kc: k8s.KubeConfig;
  namespace: string;
  pools: number;
  inFlight: number;
  /** Pool `i` as the benchmark created it. */
  pool: (i: number) => NodePool;
  sent: Map<string, Sent[]>;
  server?: ServerWrites;
}

const isTokenSecret = (body: k8s.KubernetesObject): boolean =>
  body.kind === 'Secret' && body.metadata?.labels?.[LABELS.tokenSecret] === 'true';

/** The ignition server's two writes of `pool` after its token Secret was applied (`applied`). */
async function serverWrites(
  ctx: { core: k8s.CoreV1Api; guest: Applier; namespace: string },
  pool: string,
  applied: k8s.KubernetesObject,
  minted: k8s.V1Secret,
): Promise<void> {
  const { core, guest, namespace } = ctx;
  const name = applied.metadata?.name ?? '';
  const annotations = minted.metadata?.annotations ?? {};
  const expiresAtMs = Date.now() + 3_600_000;
  await guest.apply(desiredBootstrapSecret({ token: newBootstrapToken(), namespace, pool, expiresAtMs }));
  const data = minted.data ?? {};
  const pick = <T>(from: Record<string, T>, keys: string[]): Record<string, T> =>
    Object.fromEntries(keys.flatMap((k) => (from[k] === undefined ? [] : [[k, from[k]]])));
  const patch = (resourceVersion: string | undefined, body: Partial<k8s.V1Secret>): Promise<k8s.V1Secret> =>
    core.patchNamespacedSecret(
      { name, namespace, body: { ...body, metadata: { ...body.metadata, resourceVersion } } },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
  await patch(applied.metadata?.resourceVersion, {
    data: pick(data, [SECRET_KEYS.token, SECRET_KEYS.bootstrapToken, SECRET_KEYS.joinServer, SECRET_KEYS.joinCa]),
    metadata: {
      annotations: pick(annotations, [
        ANNOTATIONS.tokenIssuedAt,
        ANNOTATIONS.payloadReason,
        ANNOTATIONS.payloadMessage,
      ]),
    },
  });
}

/** Replays the window (plan above); returns the seconds it took. */
export async function replaySeconds(plan: ReplayPlan): Promise<number> {
  const { kc, namespace, server } = plan;
  const objects = k8s.KubernetesObjectApi.makeApiClient(kc);
  const applier = createApplier(kc, 'kindling-bench-replay');
  const ctx = server && {
    core: kc.makeApiClient(k8s.CoreV1Api),
    guest: createApplier(server.guest, 'kindling-bench-replay'),
    namespace,
  };
  const moved = (body: k8s.KubernetesObject, uid: string): k8s.KubernetesObject => {
    const meta = body.metadata ?? {};
    const owners = meta.ownerReferences?.map((o) => ({ ...o, uid }));
    return { ...body, metadata: { ...meta, namespace, ...(owners ? { ownerReferences: owners } : {}) } };
  };
  const started = performance.now();
  await inFlight([...Array(plan.pools).keys()], plan.inFlight, async (i) => {
    const name = `pool-${i}`;
    const created = (await objects.create({ ...plan.pool(i), metadata: { name, namespace } })) as k8s.KubernetesObject;
    for (const { status, body } of plan.sent.get(name) ?? []) {
      const replayed = moved(body, created.metadata?.uid ?? '');
      const applied = await (status ? applier.applyStatus(replayed) : applier.apply(replayed));
      const minted = server?.tokenSecrets.get(name);
      if (ctx && minted && isTokenSecret(body)) await serverWrites(ctx, name, applied, minted);
    }
  });
  return (performance.now() - started) / 1000;
}

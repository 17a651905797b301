/**
 * TEST ONLY: plays the ignition server's part of the token-Secret handshake (it mints SECRET_KEYS.token into
 * every new token Secret and stamps ANNOTATIONS.tokenIssuedAt), so the controller can be tested on the real
 * bed while the real ignition server is built in parallel. The lead swaps the real one in for end-to-end tests.
 * The tokens are opaque test strings, not signed JWTs.
 */
import * as k8s from '@kubernetes/client-node';
import { ANNOTATIONS, LABELS, SECRET_KEYS } from '../../api/src/keys.js';

export interface TokenStandIn {
  /** Mints a new token into one Secret now (a rotation). */
  rotate(namespace: string, name: string): Promise<string>;
  pause(): void;
  resume(): void;
  stop(): void;
  /** Tokens minted so far. */
  readonly minted: number;
}

export function startTokenStandIn(kc: k8s.KubeConfig, intervalMs = 100): TokenStandIn {
  const core = kc.makeApiClient(k8s.CoreV1Api);
  let paused = false;
  let stopped = false;
  let minted = 0;
  let busy = false;
  const mint = async (namespace: string, name: string): Promise<string> => {
    minted++;
    const token = `stand-in-token-${name}-${minted}`;
    const body = { metadata: { annotations: { [ANNOTATIONS.tokenIssuedAt]: new Date().toISOString() } }, data: { [SECRET_KEYS.token]: Buffer.from(token).toString('base64') } };
    await core.patchNamespacedSecret({ name, namespace, body, fieldManager: 'test-ignition-server-stand-in' }, k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch));
    return token;
  };
  const tick = async (): Promise<void> => {
    const list = await core.listSecretForAllNamespaces({ labelSelector: `${LABELS.tokenSecret}=true` });
    const missing = list.items.filter((s) => s.data?.[SECRET_KEYS.token] === undefined && !s.metadata?.deletionTimestamp);
    await Promise.all(missing.map((s) => mint(s.metadata?.namespace ?? '', s.metadata?.name ?? '').catch(() => undefined)));
  };
  const timer = setInterval(() => {
    if (paused || stopped || busy) return;
    busy = true;
    void tick()
      .catch(() => undefined)
      .finally(() => (busy = false));
  }, intervalMs);
  return {
    rotate: mint,
    pause: () => void (paused = true),
    resume: () => void (paused = false),
    stop: () => {
      stopped = true;
      clearInterval(timer);
    },
    get minted() {
      return minted;
    },
  };
}

/** What the end-to-end tests of in-place updates on the `inplace` pool share: when a rollout has settled. */
import { ANNOTATIONS, NODE_STATES } from '../../api/src/keys.js';
import type { LocalEnvironment } from './environment.js';

export async function everyHost(hosts: readonly string[], test: (host: string) => Promise<boolean>): Promise<boolean> {
  return (await Promise.all(hosts.map(test))).every(Boolean);
}

/** Every inplace node at its desired config, Done, schedulable; the pool Ready with no update under way. */
export async function settled(env: LocalEnvironment): Promise<boolean> {
  const nodes = await env.nodes('inplace');
  const done = nodes.every((n) => {
    const a = n.metadata?.annotations ?? {};
    return (
      a[ANNOTATIONS.currentConfig] === a[ANNOTATIONS.desiredConfig] &&
      a[ANNOTATIONS.state] === NODE_STATES.done &&
      n.spec?.unschedulable !== true
    );
  });
  const conditions = (await env.pool('inplace')).status?.conditions ?? [];
  const updating = conditions.find((c) => c.type === 'UpdatingConfig');
  return (
    nodes.length === 3 &&
    done &&
    conditions.some((c) => c.type === 'Ready' && c.status === 'True') &&
    updating?.status === 'False'
  );
}

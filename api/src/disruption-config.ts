/**
 * The disruption of a config change judged on the pool's inputs (the release reference and the config
 * documents, as the token Secret stores them) rather than on a host: which path, unit or SSH keys each
 * MachineConfig or KubeletConfig declaration touches, what the policy gives each, and the least action over
 * all. The nodepool-controller records it in status.rollout and `kindling plan` shows it, before any node
 * moves; the agent computes the same least action from what it finds on its host (the same policy and
 * leastDisruption), so the two agree wherever the host is what the previous config left.
 */
import { HOST_PATHS } from './host-paths.js';
import {
  actionsFor,
  describeAction,
  leastDisruption,
  type ChangeTarget,
  type Disruption,
  type EffectiveDisruptionPolicy,
} from './disruption.js';
import type { HashInputs } from './config-hash.js';

/** One changed path, unit or user's SSH keys, and the actions the policy gives it ("Restart kubelet.service"). */
export interface TargetDisruption {
  target: string;
  actions: string;
}

export interface ConfigDisruption {
  changes: TargetDisruption[];
  disruption: Disruption;
}

interface Declared {
  target: ChangeTarget;
  label: string;
  json: string;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const list = (v: unknown): Record<string, unknown>[] => (Array.isArray(v) ? v.filter(isObject) : []);

/** What one MachineConfig's Ignition fragment declares, keyed by what it touches. */
function fragmentDeclarations(config: Record<string, unknown>): [string, Declared][] {
  const storage = isObject(config.storage) ? config.storage : {};
  const systemd = isObject(config.systemd) ? config.systemd : {};
  const passwd = isObject(config.passwd) ? config.passwd : {};
  const paths = [...list(storage.files), ...list(storage.directories), ...list(storage.links)];
  return [
    ...paths.map((p): [string, Declared] => {
      const path = String(p.path);
      return [`file ${path}`, { target: { kind: 'file', path }, label: path, json: JSON.stringify(p) }];
    }),
    ...list(systemd.units).map((u): [string, Declared] => {
      const name = String(u.name);
      return [`unit ${name}`, { target: { kind: 'unit', name }, label: `unit ${name}`, json: JSON.stringify(u) }];
    }),
    ...list(passwd.users).map((u): [string, Declared] => {
      const user = String(u.name);
      const json = JSON.stringify(u.sshAuthorizedKeys ?? []);
      return [`ssh ${user}`, { target: { kind: 'sshKeys' }, label: `SSH keys of ${user}`, json }];
    }),
  ];
}

/** Everything a config (SECRET_KEYS.config) and release declare on a host; a path declared twice holds both. */
function declarations(inputs: HashInputs): Map<string, Declared> {
  const found = new Map<string, Declared>();
  const add = (key: string, d: Declared): void => {
    const before = found.get(key);
    found.set(key, before ? { ...d, json: `${before.json}\n${d.json}` } : d);
  };
  const release = HOST_PATHS.releaseInfo;
  add(`file ${release}`, {
    target: { kind: 'file', path: release },
    label: `${release} (release)`,
    json: inputs.release,
  });
  for (const doc of list(JSON.parse(inputs.config) as unknown)) {
    const spec = isObject(doc.spec) ? doc.spec : {};
    if (doc.kind === 'KubeletConfig') {
      const path = HOST_PATHS.kubeletConfig;
      add(`file ${path}`, {
        target: { kind: 'file', path },
        label: `${path} (KubeletConfig)`,
        json: JSON.stringify(spec),
      });
    } else if (isObject(spec.config)) for (const [key, d] of fragmentDeclarations(spec.config)) add(key, d);
  }
  return found;
}

/** Per changed path, unit and user's SSH keys (added, removed or changed), its actions; and the least action. */
export function configDisruption(
  policy: EffectiveDisruptionPolicy,
  before: HashInputs,
  after: HashInputs,
): ConfigDisruption {
  const [a, b] = [declarations(before), declarations(after)];
  const keys = [...new Set([...a.keys(), ...b.keys()])].sort();
  const changed = keys.flatMap((key) => {
    const d = b.get(key) ?? a.get(key);
    return d && a.get(key)?.json !== b.get(key)?.json ? [d] : [];
  });
  return {
    changes: changed.map((d) => ({
      target: d.label,
      actions: actionsFor(policy, d.target).map(describeAction).join(', '),
    })),
    disruption: leastDisruption(
      policy,
      changed.map((d) => d.target),
    ),
  };
}

/**
 * A pool's payload: the release's base fragments and the pool's MachineConfigs, merged in name order as the
 * machine-config operator renders a pool (a release fragment `00-base.json` sorts as `00-base`), then the
 * KubeletConfigs rendered into the kubelet configuration file, then the release identity file. Whatever
 * cannot be merged is refused with a reason the pool's owner can act on (InvalidConfigError).
 */
import { HOST_PATHS } from '../../../api/src/host-paths.js';
import type { Release } from '../release/types.js';
import { isObject, mergeObjects, type Json, type JsonObject } from './merge.js';
import { minimumVersion, type SpecVersion } from './versions.js';
import { dataUrlBytes } from '../../../support/src/data-url.js';

export const KUBELET_CONFIG_PATH = HOST_PATHS.kubeletConfig;
export const RELEASE_INFO_PATH = HOST_PATHS.releaseInfo;
const MC_API = 'machineconfiguration.openshift.io/v1';

/** The payload's config cannot be rendered; the message says why (→ ValidGeneratedPayload InvalidConfig). */
export class InvalidConfigError extends Error {
  override readonly name = 'InvalidConfigError';
}

export interface RenderedPayload {
  /** Ignition config without `ignition.version` (set per client when served). */
  config: JsonObject;
  minVersion: SpecVersion;
}

/** Fields of a MachineConfig's spec Kindling does not implement: refused rather than silently dropped. */
const UNSUPPORTED_MC_FIELDS = ['osImageURL', 'baseOSExtensionsContainerImage', 'extensions', 'kernelType', 'fips'];
/** Kubelet fields the host's bootstrap owns (the MCO refuses the same ones). */
const PROTECTED_KUBELET_FIELDS = [
  'staticPodPath',
  'authentication',
  'authorization',
  'clusterDomain',
  'clusterDNS',
  'cgroupDriver',
];

interface Named {
  name: string;
  config: JsonObject;
  kernelArguments: string[];
}

function docName(doc: JsonObject, i: number): string {
  const name = isObject(doc.metadata) ? doc.metadata.name : undefined;
  if (typeof name !== 'string' || name === '')
    throw new InvalidConfigError(`config document ${i} has no metadata.name`);
  return name;
}

/** Checks one Ignition fragment and returns it; `what` names it in messages. */
function checkFragment(config: Json | undefined, what: string): JsonObject {
  if (config === undefined) return {};
  if (!isObject(config)) throw new InvalidConfigError(`${what}: the Ignition config is not an object`);
  const ignition = isObject(config.ignition) ? config.ignition : {};
  const version = typeof ignition.version === 'string' ? ignition.version : '';
  if (!/^3\.[0-4]\.0$/.test(version))
    throw new InvalidConfigError(
      `${what}: ignition.version "${version}" is not a supported spec version (3.0.0 to 3.4.0)`,
    );
  if (ignition.config !== undefined)
    throw new InvalidConfigError(
      `${what}: ignition.config (merge/replace of remote configs) is not allowed in a payload`,
    );
  return config;
}

function machineConfig(doc: JsonObject, i: number): Named {
  const name = docName(doc, i);
  const what = `MachineConfig ${name}`;
  if (doc.apiVersion !== MC_API) throw new InvalidConfigError(`${what}: apiVersion must be ${MC_API}`);
  const spec = isObject(doc.spec) ? doc.spec : {};
  const unsupported = UNSUPPORTED_MC_FIELDS.filter((f) => spec[f] !== undefined && spec[f] !== '' && spec[f] !== false);
  if (unsupported.length > 0)
    throw new InvalidConfigError(`${what}: spec.${unsupported.join(', spec.')} is not supported`);
  const kargs = spec.kernelArguments ?? [];
  if (!Array.isArray(kargs) || kargs.some((k) => typeof k !== 'string' || k.trim() === '')) {
    throw new InvalidConfigError(`${what}: spec.kernelArguments must be a list of non-empty strings`);
  }
  return { name, config: checkFragment(spec.config, what), kernelArguments: kargs as string[] };
}

function kubeletConfig(doc: JsonObject, i: number): { name: string; config: JsonObject } {
  const name = docName(doc, i);
  const spec = isObject(doc.spec) ? doc.spec : {};
  const unknown = Object.keys(spec).filter((k) => k !== 'kubeletConfig' && k !== 'machineConfigPoolSelector');
  if (unknown.length > 0)
    throw new InvalidConfigError(`KubeletConfig ${name}: spec.${unknown.join(', spec.')} is not supported`);
  if (!isObject(spec.kubeletConfig))
    throw new InvalidConfigError(`KubeletConfig ${name}: spec.kubeletConfig must be an object`);
  const owned = PROTECTED_KUBELET_FIELDS.filter((f) => (spec.kubeletConfig as JsonObject)[f] !== undefined);
  if (owned.length > 0)
    throw new InvalidConfigError(
      `KubeletConfig ${name}: ${owned.join(', ')} cannot be set (the node bootstrap owns it)`,
    );
  return { name, config: spec.kubeletConfig };
}

function splitDocs(docs: unknown): { machineConfigs: Named[]; kubeletConfigs: { name: string; config: JsonObject }[] } {
  if (!Array.isArray(docs)) throw new InvalidConfigError('the config is not a list of documents');
  const machineConfigs: Named[] = [];
  const kubeletConfigs: { name: string; config: JsonObject }[] = [];
  docs.forEach((doc: unknown, i) => {
    if (!isObject(doc)) throw new InvalidConfigError(`config document ${i} is not an object`);
    if (doc.kind === 'MachineConfig') machineConfigs.push(machineConfig(doc, i));
    else if (doc.kind === 'KubeletConfig') kubeletConfigs.push(kubeletConfig(doc, i));
    else
      throw new InvalidConfigError(
        `config document ${i} is a ${JSON.stringify(doc.kind ?? null)}: only MachineConfig and KubeletConfig are supported`,
      );
  });
  return {
    machineConfigs,
    kubeletConfigs: kubeletConfigs.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)),
  };
}

const dataUrl = (text: string): string => `data:;base64,${Buffer.from(text).toString('base64')}`;

function file(path: string, text: string): JsonObject {
  return { path, mode: 420, overwrite: true, contents: { source: dataUrl(text) } };
}

/** The text of a file of the merged config when its contents are an inline data URL. */
function inlineText(config: JsonObject, path: string): string | undefined {
  const files = isObject(config.storage) && Array.isArray(config.storage.files) ? config.storage.files : [];
  const entry = files.find((f) => isObject(f) && f.path === path);
  const source = isObject(entry) && isObject(entry.contents) ? entry.contents.source : undefined;
  return typeof source === 'string' ? dataUrlBytes(source)?.toString('utf8') : undefined;
}

/**
 * What the node bootstrap owns in every kubelet configuration (hence PROTECTED_KUBELET_FIELDS): clients are
 * authenticated against the guest CA the join material writes, requests authorised by the guest apiserver,
 * and both certificates come from CSRs (client rotation, serving certificates through Kindling's approver).
 */
const KUBELET_BOOTSTRAP: JsonObject = {
  apiVersion: 'kubelet.config.k8s.io/v1beta1',
  kind: 'KubeletConfiguration',
  authentication: {
    anonymous: { enabled: false },
    webhook: { enabled: true },
    x509: { clientCAFile: HOST_PATHS.guestCa },
  },
  authorization: { mode: 'Webhook' },
  rotateCertificates: true,
  serverTLSBootstrap: true,
};

/** The kubelet configuration: the bootstrap's fields, the release's file (JSON) if any, then each KubeletConfig in name order. */
function renderKubelet(config: JsonObject, docs: { name: string; config: JsonObject }[]): JsonObject {
  let base: JsonObject = KUBELET_BOOTSTRAP;
  const existing = inlineText(config, KUBELET_CONFIG_PATH);
  if (existing !== undefined) {
    try {
      const parsed = JSON.parse(existing) as Json;
      if (isObject(parsed)) base = { ...parsed, ...KUBELET_BOOTSTRAP };
    } catch {
      throw new InvalidConfigError(
        `the release's ${KUBELET_CONFIG_PATH} is not JSON, so KubeletConfigs cannot be merged into it`,
      );
    }
  }
  const kubelet = docs.reduce((acc, d) => mergeObjects(acc, d.config, 'kubelet'), base);
  return { storage: { files: [file(KUBELET_CONFIG_PATH, `${JSON.stringify(kubelet, null, 2)}\n`)] } };
}

/** Paths the join material writes per host, or the kubelet writes itself: a payload that wrote them would
 * either collide with the join files (Ignition refuses a path listed twice) or break the node's identity. */
const RESERVED_PATHS = new Set<string>([
  HOST_PATHS.guestCa,
  HOST_PATHS.bootstrapKubeconfig,
  HOST_PATHS.kubeletKubeconfig,
  HOST_PATHS.kubeletClientCert,
]);

function checkPath(kind: string, path: unknown): asserts path is string {
  if (typeof path !== 'string' || !path.startsWith('/'))
    throw new InvalidConfigError(`storage.${kind}: path ${JSON.stringify(path)} is not absolute`);
  if (RESERVED_PATHS.has(path))
    throw new InvalidConfigError(`storage.${kind}: ${path} is written by the node's join material, not by a payload`);
}

/** Ignition refuses a path that is both a file and a directory or link; say which documents did it. */
function checkPathConflicts(config: JsonObject): void {
  const storage = isObject(config.storage) ? config.storage : {};
  const seen = new Map<string, string>();
  for (const kind of ['files', 'directories', 'links'] as const) {
    const list = Array.isArray(storage[kind]) ? storage[kind] : [];
    for (const entry of list) {
      const path = isObject(entry) ? entry.path : undefined;
      checkPath(kind, path);
      const before = seen.get(path);
      if (before !== undefined && before !== kind)
        throw new InvalidConfigError(`${path} is both in storage.${before} and storage.${kind}`);
      seen.set(path, kind);
    }
  }
}

export function renderPayload(release: Release, configDocs: unknown): RenderedPayload {
  const { machineConfigs, kubeletConfigs } = splitDocs(configDocs);
  const fragments: Named[] = release.fragments.map((f) => ({
    name: f.name.replace(/\.json$/, ''),
    config: checkFragment(f.config as JsonObject, `release fragment ${f.name}`),
    kernelArguments: [],
  }));
  // A stable sort: on a tie the release fragment comes first and the pool's document overrides it.
  const ordered = [...fragments, ...machineConfigs].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  let config: JsonObject = {};
  const kernelArguments: string[] = [];
  for (const part of ordered) {
    config = mergeObjects(config, part.config);
    for (const k of part.kernelArguments) if (!kernelArguments.includes(k)) kernelArguments.push(k);
  }
  if (kernelArguments.length > 0) config = mergeObjects(config, { kernelArguments: { shouldExist: kernelArguments } });
  config = mergeObjects(config, renderKubelet(config, kubeletConfigs));
  const info = { ...release.manifest, digest: release.digest };
  config = mergeObjects(config, { storage: { files: [file(RELEASE_INFO_PATH, `${JSON.stringify(info)}\n`)] } });
  checkPathConflicts(config);
  return { config, minVersion: minimumVersion(config) };
}

/** The payload bytes for one spec version. */
export function serialize(payload: RenderedPayload, version: SpecVersion): Buffer {
  const { ignition, ...rest } = payload.config;
  return Buffer.from(JSON.stringify({ ignition: { ...(isObject(ignition) ? ignition : {}), version }, ...rest }));
}

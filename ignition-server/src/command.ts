/**
 * `kindling ignition-server`: the HTTPS `/ignition` endpoint and the token-Secret controller in one process.
 * Every replica serves; the elected leader mints, rotates and expires tokens.
 * `kindling release build`: builds a release image from a folder (tests and the local environment).
 */
import { readFile } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { COMPONENT_FLAGS, runComponent, type ComponentContext } from '../../support/src/component.js';
import { heapFlags } from '../../support/src/young-generation.js';
import { ConfigError, flagName, tenantNamespaces, type ConfigOf, type Namespaces } from '../../support/src/config.js';
import type { ReadinessCheck } from '../../support/src/ops-server.js';
import { defineCommand, type Command } from '../../support/src/command.js';
import { TokenSecretController } from './controller.js';
import { ServingPool } from './serving/pool.js';
import { createIgnitionMetrics, type IgnitionMetrics } from './metrics.js';
import type { Logger } from '../../support/src/logger.js';
import { PayloadStore } from './payload/store.js';
import { registryEntries, signedPayloads, type EntryRepository, type SharedPayloads } from './payload/shared.js';
import { createValidator } from './payload/validate.js';
import { readRelease, resolveRelease } from './release/open.js';
import {
  DEFAULT_MAX_CONFIG_BYTES,
  DEFAULT_MAX_RELEASE_BYTES,
  DEFAULT_MAX_RELEASE_LAYERS,
} from '../../api/src/limits.js';
import { parsePullSecret, type RegistryOptions } from './release/registry.js';
import { admitRelease, parseAllowedRegistries, type ReleasePolicy } from './release/policy.js';
import { TokenIndex, type TokenSecretEntry } from './token-index.js';
import { loadSigningKey } from './tokens.js';
import type { EntrySeal } from './payload/signature.js';
import { createGuestJoin } from './join.js';
import { createGuestKubeConfigs } from '../../support/src/guest-kubeconfigs.js';
import * as k8s from '#k8s';
import { allocator } from '../../support/src/malloc.js';
import { releaseCommandRun } from './release/command.js';

const FLAGS = {
  ...COMPONENT_FLAGS,
  ...heapFlags('ignition-server'),
  servingAddress: { type: 'string', default: '0.0.0.0:9443', help: 'HTTPS address of /ignition' },
  tlsCertFile: { type: 'string', default: '', help: 'Serving certificate (PEM), reloaded when it changes' },
  tlsKeyFile: { type: 'string', default: '', help: 'Serving key (PEM), reloaded when it changes' },
  signingKeyFile: {
    type: 'string',
    default: '',
    help: 'ECDSA P-256 private key (PEM) signing the bearer tokens and the entries of --payload-repository; the same file on every replica',
  },
  tokenTtl: { type: 'duration', default: 11 * 3_600_000, help: 'Token lifetime; tokens rotate at half of it' },
  namespace: {
    type: 'string',
    default: '',
    help: 'One more namespace to serve, as in --namespaces (the older spelling, for this server only)',
  },
  allowedRegistries: {
    type: 'list',
    default: [] as string[],
    help: 'Registry hosts (host[:port]) releases may be pulled from, comma-separated; "*": any registry. Empty: none',
  },
  allowLocalReleases: {
    type: 'bool',
    default: false,
    help: "Let releases name OCI layouts on this server's own disk (oci:, oci-archive:); for tests and the local environment",
  },
  cacheDir: {
    type: 'string',
    default: '/var/cache/kindling-ignition',
    help: 'Directory persisting generated payloads across restarts',
  },
  cacheMaxBytes: {
    type: 'int',
    default: 256 * 1024 * 1024,
    help: 'Bytes of payloads kept in memory (the rest is read back from the cache directory)',
  },
  cacheDirMaxBytes: {
    type: 'int',
    default: 2 * 1024 * 1024 * 1024,
    help: 'Bytes of payload files kept in the cache directory (least recently used pruned first)',
  },
  payloadRepository: {
    type: 'string',
    default: '',
    help: 'OCI repository (host[:port]/repository) where generated payloads are shared by every replica and kept across restarts; the leader generates, the others read. Empty: each replica generates its own',
  },
  pullSecretFile: {
    type: 'string',
    default: '',
    help: 'dockerconfigjson pull secret for release registries (and --payload-repository, which it must let push)',
  },
  registryCaFile: { type: 'string', default: '', help: 'Extra CA bundle (PEM) trusted for release registries' },
  ignitionValidate: {
    type: 'string',
    default: 'ignition-validate',
    help: 'ignition-validate binary checking each generated payload; empty: skip',
  },
  certReloadInterval: {
    type: 'duration',
    default: 10_000,
    help: 'How often the serving certificate files are checked for changes',
  },
  servingThreads: {
    type: 'int',
    default: 0,
    help: 'Threads answering /ignition, all on the serving address; 0: one per core',
  },
  maxConnections: {
    type: 'int',
    default: 4096,
    help: 'Connections this process serves at once, over all its serving threads, once their TLS handshake is done; one more is answered 503 (IGN_SERVER_BUSY)',
  },
  generationsPerNamespace: {
    type: 'int',
    default: 2,
    help: "Payload generations of one namespace in flight at once (of 4): one tenant's many token Secrets cannot hold every generation worker",
  },
  maxConfigBytes: {
    type: 'int',
    default: DEFAULT_MAX_CONFIG_BYTES,
    help: "Bytes the files of one pool's payload (release fragments and MachineConfigs) may take in all, data URLs decoded and inflated; past it the pool's ValidGeneratedPayload is False with the sizes",
  },
  maxReleaseBytes: {
    type: 'int',
    default: DEFAULT_MAX_RELEASE_BYTES,
    help: "Bytes the layers of one release image may take in all once inflated; past it the pool's ValidGeneratedPayload is False with the sizes",
  },
  maxReleaseLayers: {
    type: 'int',
    default: DEFAULT_MAX_RELEASE_LAYERS,
    help: 'Layers one release image may have',
  },
  // Kept for one release so that a deployment still passing it starts. It defaulted to true, so a deployment
  // gave it only to turn it off: that is the case warned of.
  favourMemory: {
    type: 'bool',
    default: true,
    help: 'Deprecated, no effect (removed in the next release): V8 is now tuned for memory by --memory-saver',
  },
} as const;

type IgnitionServerConfig = ConfigOf<typeof FLAGS>;

function required(cfg: IgnitionServerConfig): void {
  for (const key of ['tlsCertFile', 'tlsKeyFile', 'signingKeyFile'] as const) {
    if (cfg[key] === '') throw new ConfigError(`--${flagName(key)} is required`);
  }
  for (const key of [
    'maxConnections',
    'generationsPerNamespace',
    'maxConfigBytes',
    'maxReleaseBytes',
    'maxReleaseLayers',
  ] as const)
    if (cfg[key] < 1) throw new ConfigError(`--${flagName(key)} must be at least 1`);
  watchedNamespaces(cfg);
  releasePolicy(cfg);
  registryEntriesOf(cfg, {});
}

/** The namespaces whose token Secrets the server acts on: --namespaces, and --namespace (the older spelling). */
export function watchedNamespaces(cfg: Pick<IgnitionServerConfig, 'namespaces' | 'namespace'>): Namespaces {
  return tenantNamespaces([...cfg.namespaces, cfg.namespace]);
}

export function releasePolicy(
  cfg: Pick<IgnitionServerConfig, 'allowedRegistries' | 'allowLocalReleases'>,
): ReleasePolicy {
  return Object.freeze({
    allowLocal: cfg.allowLocalReleases,
    registries: parseAllowedRegistries(cfg.allowedRegistries),
  });
}

async function registryOptions(cfg: IgnitionServerConfig): Promise<RegistryOptions> {
  const opts: RegistryOptions = {};
  if (cfg.registryCaFile !== '') opts.ca = await readFile(cfg.registryCaFile, 'utf8');
  if (cfg.pullSecretFile !== '') opts.credentials = parsePullSecret(await readFile(cfg.pullSecretFile, 'utf8'));
  return opts;
}

export function warnAtStart(cfg: Pick<IgnitionServerConfig, 'favourMemory'>, log: Logger): void {
  if (allocator() !== 'jemalloc')
    log.warn(
      { allocator: 'libc' },
      'Not running on jemalloc as the image does (LD_PRELOAD=libjemalloc.so.2): expect about 10% more memory',
    );
  if (!cfg.favourMemory)
    log.warn(
      'favour-memory (--favour-memory, KINDLING_FAVOUR_MEMORY) is deprecated and has no effect: V8 runs with its memory saver unless --memory-saver=false',
    );
}

function createStore(
  cfg: IgnitionServerConfig,
  deps: {
    registry: RegistryOptions;
    policy: ReleasePolicy;
    seal: EntrySeal;
    metrics: IgnitionMetrics;
    generates: () => boolean;
    log: Logger;
  },
): PayloadStore {
  const { registry, policy, metrics, generates } = deps;
  const log = deps.log.child({ part: 'payloads' });
  return new PayloadStore({
    cacheDir: cfg.cacheDir,
    maxBytes: cfg.cacheMaxBytes,
    maxDirBytes: cfg.cacheDirMaxBytes,
    admit: (ref) => admitRelease(ref, policy),
    resolve: (ref) => resolveRelease(ref, registry),
    read: (ref, digest) =>
      readRelease(ref, registry, digest, { maxLayers: cfg.maxReleaseLayers, maxBytes: cfg.maxReleaseBytes }),
    maxConfigBytes: cfg.maxConfigBytes,
    validate: cfg.ignitionValidate === '' ? undefined : createValidator(cfg.ignitionValidate),
    shared: sharedPayloads(cfg, registry, { seal: deps.seal, metrics, log }),
    generates,
    metrics,
    log,
  });
}

/** What every replica runs: the store, the controller's informer, the HTTPS server. */
export async function startIgnitionServer(
  cfg: IgnitionServerConfig,
  ctx: ComponentContext,
): Promise<{ lead: () => () => Promise<void>; port: number; readiness: ReadinessCheck[] }> {
  required(cfg);
  warnAtStart(cfg, ctx.log);
  const metrics = createIgnitionMetrics(ctx.registry);
  const { authority, seal } = await loadSigningKey(cfg.signingKeyFile);
  const registry = await registryOptions(cfg);
  const policy = releasePolicy(cfg);
  let leading = false;
  const store = createStore(cfg, { registry, policy, seal, metrics, generates: () => leading, log: ctx.log });
  await store.init();
  const { registries, allowLocal } = policy;
  ctx.log.info(
    {
      namespaces: watchedNamespaces(cfg),
      allowedRegistries: registries === 'any' ? '*' : [...registries],
      allowLocalReleases: allowLocal,
    },
    'Serving the token Secrets of these namespaces, with releases from these sources only',
  );
  const index = new TokenIndex();
  const core = ctx.kubeConfig.makeApiClient(k8s.CoreV1Api);
  const join = createGuestJoin(
    createGuestKubeConfigs((namespace, name) => core.readNamespacedSecret({ namespace, name })),
  );
  const controller = new TokenSecretController({
    kubeConfig: ctx.kubeConfig,
    log: ctx.log.child({ part: 'tokens' }),
    authority,
    index,
    store,
    join,
    ttlMs: cfg.tokenTtl,
    namespaces: watchedNamespaces(cfg),
    metrics,
    queueMetrics: ctx.queueMetrics,
    generationsPerNamespace: cfg.generationsPerNamespace,
  });
  const serving = new ServingPool({
    threads: cfg.servingThreads > 0 ? cfg.servingThreads : availableParallelism(),
    address: cfg.servingAddress,
    certFile: cfg.tlsCertFile,
    keyFile: cfg.tlsKeyFile,
    publicKeyPem: authority.publicKeyPem,
    index,
    store,
    onServed: (key, atMs) => whenIndexed(index, key, (entry) => controller.served(entry, atMs)),
    onPayloadMissing: (key) => whenIndexed(index, key, (entry) => controller.regenerate(entry)),
    load: (pool, hash) => controller.load(pool, hash),
    onFailed: () => void ctx.shutdown.run('a serving thread failed').then(() => process.exit(1)),
    log: ctx.log.child({ part: 'serving' }),
    logName: 'kindling-ignition-server',
    logLevel: cfg.logLevel,
    reloadIntervalMs: cfg.certReloadInterval,
    maxConnections: cfg.maxConnections,
  });
  // The threads start while the token Secrets are listed; they accept once the list is in.
  serving.start();
  ctx.memorySaver?.onCollect(() => serving.collect());
  metrics.watchRequests(() => serving.requests());
  metrics.watchThreadPauses(() => serving.pauses());
  await controller.start();
  ctx.shutdown.add('token controller', () => controller.stop());
  await serving.listen();
  ctx.shutdown.add('serving threads', () => serving.drain());
  ctx.log.info({ servingPort: serving.port }, 'Serving /ignition');
  const lead = (): (() => Promise<void>) => {
    const stop = controller.lead();
    leading = true;
    return async () => {
      leading = false;
      await stop();
    };
  };
  return { lead, port: serving.port, readiness: [{ name: 'token-secrets-synced', check: () => controller.synced }] };
}

function registryEntriesOf(cfg: IgnitionServerConfig, registry: RegistryOptions): EntryRepository | undefined {
  if (cfg.payloadRepository === '') return undefined;
  try {
    return registryEntries(cfg.payloadRepository, registry);
  } catch (err) {
    throw new ConfigError(`--payload-repository: ${(err as Error).message}`);
  }
}

function sharedPayloads(
  cfg: IgnitionServerConfig,
  registry: RegistryOptions,
  deps: { seal: EntrySeal; metrics: IgnitionMetrics; log: Logger },
): SharedPayloads | undefined {
  const entries = registryEntriesOf(cfg, registry);
  return entries && signedPayloads(entries, deps.seal, deps);
}

function whenIndexed(index: TokenIndex, key: string, fn: (entry: TokenSecretEntry) => void): void {
  const entry = index.get(key);
  if (entry) fn(entry);
}

export const ignitionServerCommand: Command = defineCommand({
  name: 'ignition-server',
  flags: FLAGS,
  async run(cfg) {
    required(cfg);
    let lead: (() => () => Promise<void>) | undefined;
    await runComponent({
      name: 'kindling-ignition-server',
      config: cfg,
      async start(ctx) {
        const started = await startIgnitionServer(cfg, ctx);
        lead = started.lead;
        return started.readiness;
      },
      lead: () => Promise.resolve(lead ? lead() : async () => {}),
    });
    return 0;
  },
});

export const releaseCommand: Command = defineCommand({
  name: 'release',
  args: 'build <folder>',
  flags: {
    output: {
      type: 'string',
      default: '',
      help: 'Write an OCI image layout: a directory, or a tar file when it ends in .tar',
    },
    tag: { type: 'string', default: 'latest', help: 'Tag of the image in the layout' },
    push: { type: 'string', default: '', help: 'Push to this registry reference (host[:port]/repository[:tag])' },
    pullSecretFile: { type: 'string', default: '', help: 'dockerconfigjson credentials for --push' },
    registryCaFile: { type: 'string', default: '', help: 'Extra CA bundle (PEM) trusted for --push' },
  },
  run: releaseCommandRun,
});

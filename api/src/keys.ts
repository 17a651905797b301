/**
 * Every annotation, label, Secret key, header and field manager that crosses a component boundary.
 * Each comment says who writes the key and who reads it: that is the contract between the deployables.
 */

/** Finalizer on NodePools. Written and removed by the nodepool-controller, so children and tokens go first. */
export const NODEPOOL_FINALIZER = 'kindling.dev/nodepool';

/** Field managers for server-side apply: one per component, so ownership of co-owned maps is exact. */
export const FIELD_MANAGERS = {
  nodepoolController: 'kindling-nodepool-controller',
  ignitionServer: 'kindling-ignition-server',
  inplaceUpgrader: 'kindling-inplace-upgrader',
  drainer: 'kindling-drainer',
  agent: 'kindling-agent',
} as const;

export const LABELS = {
  /** `<namespace>/<name>` is not a valid label value, so this holds the pool name; the namespace is the object's.
   * Written by the nodepool-controller on token/user-data Secrets and CAPI children; read by every component
   * that lists a pool's objects (ignition-server, inplace-upgrader). */
  nodePool: 'kindling.dev/nodepool',
  /** Marks a Secret as a token Secret. Written by the nodepool-controller; the ignition-server's token
   * controller watches only Secrets with this label. */
  tokenSecret: 'kindling.dev/token-secret',
  /** Marks a Secret as user-data (CAPI bootstrap data). Written by the nodepool-controller; read by it for
   * garbage collection of user-data nothing references any more. */
  userDataSecret: 'kindling.dev/user-data-secret',
  /** Config hash of a token/user-data Secret. Written by the nodepool-controller; read by the ignition-server.
   * Also on a guest payload Secret: written by the inplace-upgrader, read by it to know the Secret is current. */
  configHash: 'kindling.dev/config-hash',
  /** Namespace label for the guest namespace holding agent Pods and payload Secrets (Pod Security "privileged").
   * Written by the inplace-upgrader; read by the guest apiserver's pod-security admission. */
  podSecurityEnforce: 'pod-security.kubernetes.io/enforce',
  /** Cluster API: the Cluster an object belongs to. Written by the nodepool-controller and the test bed on
   * kubeconfig Secrets, and by the nodepool-controller on token Secrets; read by Cluster API, the
   * inplace-upgrader, and the ignition-server (whose guest cluster a token Secret's bootstrap tokens go to). */
  capiClusterName: 'cluster.x-k8s.io/cluster-name',
  /** Cluster API: the MachineSet a Machine belongs to. Written by Cluster API; read by the inplace-upgrader. */
  capiSetName: 'cluster.x-k8s.io/set-name',
  /** Cluster API: the MachineDeployment a Machine/MachineSet belongs to. Written by Cluster API; read by the
   * nodepool-controller for status. */
  capiDeploymentName: 'cluster.x-k8s.io/deployment-name',
  /** Guest Node: the zone used to spread in-place updates. Written by the host (kubelet / local provider);
   * read by the inplace-upgrader. */
  zone: 'topology.kubernetes.io/zone',
  /** Marks an agent Pod ("true") in a guest cluster. Written by the inplace-upgrader on the Pods it creates;
   * read by the drainer (never evicts the agent that asked for the drain) and by the upgrader (clean-up). */
  agentPod: 'kindling.dev/agent',
  /** Marks a payload Secret ("true") in a guest cluster. Written by the inplace-upgrader; read by it for
   * clean-up (the agent reads its Secret by name). */
  payloadSecret: 'kindling.dev/payload',
  /** Marks a management-cluster namespace as a tenant of Kindling ("true"): one of the components' --namespaces.
   * Written by whoever creates the tenant namespace (the operator; the local environment on its --namespace);
   * read by the Cluster API ExtensionConfig's namespaceSelector (deploy/) and by people listing the tenants. */
  tenant: 'kindling.dev/tenant',
} as const;

export const ANNOTATIONS = {
  // ---- NodePool (management cluster) ----
  /** How long a Node may be NotReady/Unknown before the pool's MachineHealthCheck remediates it (a Go
   * duration, e.g. "2m"; default 8m), as HyperShift's machine-health-check-timeout annotation. Written by the
   * service provider; read by the nodepool-controller. */
  machineHealthCheckTimeout: 'kindling.dev/machine-health-check-timeout',
  /** Lets one rollout start (or a held one resume) past a failing health gate (nodes unavailable beyond
   * maxUnavailable, a Degraded node, the guest's control plane unreachable): any value, such as why. Written by
   * the service provider (never the tenant: it needs patch on NodePools); read by the nodepool-controller, which
   * rewrites it to HEALTH_GATE_CONSUMED followed by the config hash the rollout moves to when it uses it, so it
   * covers that rollout to its end and none after. The maintenance window is never overridden. */
  overrideHealthGate: 'kindling.dev/override-health-gate',

  // ---- token Secret (management cluster) ----
  /** When the token Secret stops being valid (RFC3339): set when the pool's hash moved on, after a grace so
   * hosts booting right now finish. Written by the nodepool-controller; read by the ignition-server, which
   * deletes the Secret and forgets its tokens once it has passed. */
  tokenExpiresAt: 'kindling.dev/token-expires-at',
  /** When the current token was minted (RFC3339). Written by the ignition-server at mint/rotation; read by it
   * to rotate at TTL/2 and by the nodepool-controller to refresh the user-data Secret after a rotation and to
   * tell that the server is minting (a new pool's first status waits for its answer meanwhile). */
  tokenIssuedAt: 'kindling.dev/token-issued-at',
  /** First successful `/ignition` fetch with this Secret's token (RFC3339). Written by the ignition-server;
   * read by the nodepool-controller (ReachedIgnitionEndpoint, and the MachineHealthCheck gate). */
  ignitionReachedAt: 'kindling.dev/ignition-reached-at',
  /** Outcome of payload generation: a reason of CONDITION_REASONS.ValidGeneratedPayload. Written by the
   * ignition-server; read by the nodepool-controller (ValidGeneratedPayload condition). */
  payloadReason: 'kindling.dev/payload-reason',
  /** Human message for payloadReason. Same writer and reader. */
  payloadMessage: 'kindling.dev/payload-message',

  // ---- shared payload entry (an OCI artifact manifest in --payload-repository) ----
  /** The entry's signature: an ES256 JWS by the ignition signing key naming the entry's tag and its blob's
   * sha256 (ignition-server/src/payload/signature.ts). Written by the ignition-server replica that generated
   * the entry (the leader); read by every replica, which serves or caches the entry only when it verifies. */
  payloadEntrySignature: 'dev.kindling.payload.signature',

  // ---- MachineSet (management cluster), Flow 3 ----
  /** Config hash every node of the MachineSet should reach. Written by the nodepool-controller; read by the
   * inplace-upgrader. */
  targetConfigHash: 'kindling.dev/target-config-hash',
  /** Config hash every node of the MachineSet is at. Written by the inplace-upgrader when a rollout
   * completes; read by the nodepool-controller (UpdatingConfig/UpdatingVersion). */
  currentConfigHash: 'kindling.dev/current-config-hash',
  /** Resolved maxUnavailable (an integer ≥ 1). Written by the nodepool-controller; read by the upgrader. */
  maxUnavailable: 'kindling.dev/max-unavailable',
  /** Why no node may be handed out now ("waiting for the maintenance window (opens 2026-12-01T02:00Z)", a
   * failing health gate); absent when nodes may be handed out. On a MachineSet: written by the
   * nodepool-controller, read by the inplace-upgrader. On a ClusterAPI-engine pool's MachineDeployment: the same,
   * read by the extension's UpdateMachine. On a Replace pool's MachineDeployment it comes with spec.paused, which
   * Cluster API reads. Nodes handed out (Machines created or deleted) before it appeared finish. */
  rolloutHold: 'kindling.dev/rollout-hold',
  /** Why no node may drain or reboot now, while a rollout goes on: the rollout gate let the change through only
   * because the disruption policy applies it with neither (a closed maintenance window holds the rest), and the
   * agent decides from the host, which can need more (the config it booted with unknown, a drifted host). The
   * text is the hold a disruptive change would get ("waiting for the maintenance window (opens
   * 2026-12-01T02:00Z)"); absent when nodes may drain and reboot. On a MachineSet: written by the
   * nodepool-controller, read by the inplace-upgrader. On a ClusterAPI-engine pool's MachineDeployment: the same,
   * read by the extension's UpdateMachine. Both copy it into each node's payload Secret (PAYLOAD_KEYS.rolloutCeiling,
   * rewritten when it changes), where the agent reads it: a plan that drains or reboots applies nothing, and the
   * node goes Degraded with the reason until the ceiling is lifted or changes. */
  rolloutCeiling: 'kindling.dev/rollout-ceiling',
  /** How long a node has after the reboot of an in-place update to pass the health gate (Ready, its kubelet at
   * the payload's version, reported since this boot), as a Go duration ("5m"). On a MachineSet: written by the
   * nodepool-controller (spec.management.inPlace.healthCheckTimeout, defaulted), read by the inplace-upgrader.
   * On a ClusterAPI-engine pool's MachineDeployment: the same, read by the extension's UpdateMachine (through
   * the Machine's deployment-name label). On a guest Node: written by whoever hands the node its target (guest.ts handOutNode, both in-place
   * engines), in the same patch as desiredConfig; read by the agent, which rolls the update back once it passes. */
  healthCheckTimeout: 'kindling.dev/health-check-timeout',
  /** The pool's effective node disruption policy (spec.management.inPlace.disruptionPolicy over the defaults,
   * api/src/disruption.ts) as JSON. On a MachineSet or a ClusterAPI-engine pool's MachineDeployment: written by
   * the nodepool-controller, read by the inplace-upgrader or the extension's UpdateMachine, which put it in each
   * node's payload Secret (PAYLOAD_KEYS.disruptionPolicy) for the agent. */
  disruptionPolicy: 'kindling.dev/disruption-policy',
  /** Rollout progress, "N of M updated", then each drain a PodDisruptionBudget holds up ("; n03 draining,
   * blocked by PodDisruptionBudget ns/x"). Written by the inplace-upgrader; read by the nodepool-controller
   * (the UpdatingConfig/UpdatingVersion message, as is) and `kindling status` (the counts before any ";"). */
  inPlaceProgress: 'kindling.dev/inplace-progress',
  /** Rollout halted: "<node>: <reason>". On a MachineSet: written by the inplace-upgrader. On a ClusterAPI-engine
   * Machine: written by the extension's UpdateMachine while the Machine's node is Degraded towards its target,
   * removed once it is not. Read by the nodepool-controller (UpdatingConfig/UpdatingVersion Failed) and
   * `kindling status` ("halted: …"). */
  inPlaceFailure: 'kindling.dev/inplace-failure',
  /** Rollout waiting for the maintenance window: "<node>: <reason>", written instead of inPlaceFailure when the
   * node halting it is Degraded only because the rollout's ceiling holds its update back (ceilingHeld). Same
   * writers, objects and lifetime as inPlaceFailure. Read by the nodepool-controller (UpdatingConfig/
   * UpdatingVersion WaitingForMaintenanceWindow; the health gate does not count it as a Degraded node) and
   * `kindling status` ("waiting: …"). */
  inPlaceWaiting: 'kindling.dev/inplace-waiting',

  // ---- guest Node, machine-config-daemon protocol (so existing agents fit) ----
  /** Config the node is at. Written by the agent; read by the inplace-upgrader. */
  currentConfig: 'machineconfiguration.openshift.io/currentConfig',
  /** Config the node should reach. Written by the inplace-upgrader; read by the agent. */
  desiredConfig: 'machineconfiguration.openshift.io/desiredConfig',
  /** Agent state: one of NODE_STATES. Written by the agent; read by the inplace-upgrader. */
  state: 'machineconfiguration.openshift.io/state',
  /** Why the agent is Degraded. Written by the agent; read by the inplace-upgrader. */
  reason: 'machineconfiguration.openshift.io/reason',
  /** The desiredConfig whose update the rollout's ceiling holds back (PAYLOAD_KEYS.rolloutCeiling): the node is
   * Degraded only to wait for the maintenance window, and applied nothing. Written by the agent with that
   * Degraded state, removed with any other state it writes. Read by the inplace-upgrader and the extension's
   * UpdateMachine, which then write inPlaceWaiting instead of inPlaceFailure. */
  ceilingHeld: 'kindling.dev/ceiling-held',
  /** `drain-<hash>` or `uncordon-<hash>`. Written by the agent; read by the drainer. */
  desiredDrain: 'machineconfiguration.openshift.io/desiredDrain',
  /** The desiredDrain value last carried out. Written by the drainer; read by the agent. */
  lastAppliedDrain: 'machineconfiguration.openshift.io/lastAppliedDrain',
  /** "true" when the node was cordoned before the drainer drained it, so uncordon leaves it cordoned.
   * Written and read by the drainer. */
  cordonedBeforeDrain: 'kindling.dev/cordoned-before-drain',
  /** When the drainer began the current drain (RFC3339), so nodeDrainTimeout counts across drainer restarts.
   * Written and cleared by the drainer; read by it. */
  drainStartedAt: 'kindling.dev/drain-started-at',
  /** Why the last drain failed (e.g. nodeDrainTimeout reached). Written by the drainer; read by the upgrader
   * and operators. */
  drainFailure: 'kindling.dev/drain-failure',
  /** Why the current drain is not moving: "<pod> blocked by PodDisruptionBudget <ns>/<name> since <RFC3339>"
   * (format and parser in drain-blocked.ts). Written by the drainer on a PDB's refusal, rewritten only when the
   * text changes, removed once no eviction is refused and when the drain completes, fails or is cancelled;
   * read by the inplace-upgrader (rollout progress, so the NodePool's condition names the budget) and
   * `kindling status`. */
  drainBlocked: 'kindling.dev/drain-blocked',
  /** JSON list of the `key:effect` taints the pool put on the Node. Node spec.taints is an atomic list, so
   * server-side apply cannot tell Kindling's taints from others'; this remembers which ones to remove when the
   * pool drops them. Written and read by the nodepool-controller only. */
  poolTaints: 'kindling.dev/pool-taints',

  // ---- Machine (management cluster), joining ----
  /** Why the last client CSR naming this Machine's host was denied (a readable reason). Written by the
   * nodepool-controller's CSR approver; read by the nodepool-controller (AllNodesJoined) and `kindling status`. */
  joinFailure: 'kindling.dev/join-failure',
  /** The kubelet client CSR approved for this Machine, as `<csr name>/<csr uid>`: a Machine joins once. Written
   * by the nodepool-controller's CSR approver on the Machine before it approves the CSR (so a retry of the same
   * CSR is idempotent and any other client CSR naming the Machine is denied); read by the approver. */
  approvedClientCsr: 'kindling.dev/approved-client-csr',

  // ---- Cluster API ----
  /** A Machine (and its InfraMachine and BootstrapConfig) whose in-place update is under way. Written and
   * removed by Cluster API; read by the nodepool-controller, which moves a ClusterAPI-engine Machine's
   * bootstrap.dataSecretName to its KindlingConfig's only once the update is over. */
  capiUpdateInProgress: 'in-place-updates.internal.cluster.x-k8s.io/update-in-progress',
  /** Pauses Cluster API reconciliation of an object. Written by the nodepool-controller (pausedUntil); read by
   * Cluster API and by the in-place engines, which hand out no further node while it is set (nodes already
   * handed out finish). */
  capiPaused: 'cluster.x-k8s.io/paused',
  /** On a Machine: its MachineHealthCheck does not remediate it (Cluster API v1.14 honours the key's presence;
   * it does not itself spare a Machine under an in-place update). Written by the in-place engines, value
   * SKIP_REMEDIATION_INPLACE, when they hand the Machine's node a target, and removed (only that value) once
   * the node is done or the target is gone; kept while the node is Degraded. Read by Cluster API. */
  capiSkipRemediation: 'cluster.x-k8s.io/skip-remediation',
  /** Cluster autoscaler bounds on a MachineSet/MachineDeployment. Written by the nodepool-controller; read
   * by the cluster-autoscaler's Cluster API provider. */
  autoscalerMinSize: 'cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size',
  autoscalerMaxSize: 'cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size',
  /** What one node of a pool with autoScaling.min 0 offers, so the autoscaler can scale it up from zero: CPU
   * and memory quantities, the GPU count and resource name, the node labels ("k=v,k2=v2") and taints
   * ("k=v:NoSchedule,..."). Written by the nodepool-controller on the MachineSet/MachineDeployment from the
   * infrastructure template's status.capacity or spec.autoScaling.capacity; read by the cluster-autoscaler's
   * Cluster API provider. */
  autoscalerCapacityCpu: 'capacity.cluster-autoscaler.kubernetes.io/cpu',
  autoscalerCapacityMemory: 'capacity.cluster-autoscaler.kubernetes.io/memory',
  autoscalerCapacityGpuCount: 'capacity.cluster-autoscaler.kubernetes.io/gpu-count',
  autoscalerCapacityGpuType: 'capacity.cluster-autoscaler.kubernetes.io/gpu-type',
  autoscalerCapacityLabels: 'capacity.cluster-autoscaler.kubernetes.io/labels',
  autoscalerCapacityTaints: 'capacity.cluster-autoscaler.kubernetes.io/taints',
} as const;

/**
 * Taints on guest Nodes during an in-place rollout, so pods evicted from a node being updated land on nodes
 * already updated rather than on nodes the rollout drains next. Node spec.taints is an atomic list: the
 * writer changes only its own keys, under the Node's resourceVersion (guest.ts setRolloutTaint).
 */
export const TAINTS = {
  /** PreferNoSchedule on a node of an InPlace MachineSet still to be updated while its rollout goes on; removed
   * once the node is handed out, and from every node when the rollout completes or is paused. Written and
   * removed by the inplace-upgrader; read by the guest's kube-scheduler (it places pods elsewhere when it can). */
  updatePending: 'kindling.dev/update-pending',
  /** NoSchedule on a node handed a target (both in-place engines) until its agent reports it Done (the health
   * gate passed); removed by the upgrader, or by the extension's UpdateMachine once the node is done. Read by
   * the guest's kube-scheduler; the agent Pod tolerates it. */
  updating: 'kindling.dev/updating',
} as const;

/** Value of ANNOTATIONS.capiSkipRemediation Kindling writes: one someone else wrote is never removed. */
export const SKIP_REMEDIATION_INPLACE = 'kindling-inplace-update';

/** Prefix of ANNOTATIONS.overrideHealthGate once the nodepool-controller used it: `consumed:<hash>`. */
export const HEALTH_GATE_CONSUMED = 'consumed:';

/** Values of ANNOTATIONS.state, as the machine-config-daemon writes them. */
export const NODE_STATES = { working: 'Working', done: 'Done', degraded: 'Degraded' } as const;

/** Prefixes of ANNOTATIONS.desiredDrain / lastAppliedDrain values: `drain-<hash>`, `uncordon-<hash>`. */
export const DRAIN_PREFIX = 'drain-';
export const UNCORDON_PREFIX = 'uncordon-';

export const SECRET_KEYS = {
  /** Token Secret: the current bearer token (a JWT). Written by the ignition-server; read by the
   * nodepool-controller (into the user-data stub) and the inplace-upgrader (to fetch payloads). */
  token: 'token',
  /** Token Secret: the token before the last rotation, valid until its own expiry. Written and read by the
   * ignition-server. */
  rotatedToken: 'rotated-token',
  /** Token Secret: the inputs of the hash. Written by the nodepool-controller; read by the ignition-server
   * to generate the payload. `release` is the release image reference. */
  release: 'release',
  /** Token Secret: the pool's config documents, normalised, as a JSON array: every YAML document of every
   * data value of the referenced ConfigMaps (MachineConfig / KubeletConfig objects), parsed, sorted by kind
   * then metadata.name, keys sorted. The config hash is computed over `release` and this. Written by the
   * nodepool-controller; read by the ignition-server to render the payload. */
  config: 'config',
  /** Token Secret: `<namespace>/<name>` of the pool. Same writer and reader. */
  pool: 'pool',
  /** Token Secret: the guest bootstrap token (`<id>.<secret>`) paired with `token`: a host that presents that
   * token gets this one in its join material. Minted into the guest cluster's kube-system and here, at the
   * same moment and with the same expiry, by the ignition-server; read by it when serving. */
  bootstrapToken: 'bootstrap-token',
  /** Token Secret: the bootstrap token paired with `rotated-token`. Same writer and reader. */
  rotatedBootstrapToken: 'rotated-bootstrap-token',
  /** Token Secret: the guest apiserver URL hosts join, taken from the cluster's kubeconfig Secret when the
   * token was minted. Written by the ignition-server; read by it for the join material. */
  joinServer: 'join-server',
  /** Token Secret: the guest cluster's CA (PEM) taken with joinServer. Same writer and reader. */
  joinCa: 'join-ca',
  /** User-data Secret (CAPI bootstrap-data convention): the Ignition stub. Written by the
   * nodepool-controller; read by Cluster API infrastructure providers (the host). */
  value: 'value',
  /** User-data Secret: always "ignition". Same writer and reader. */
  format: 'format',
  /** `<cluster>-kubeconfig` Secret (CAPI convention): a kubeconfig for the guest cluster. Written by the
   * control-plane provider (the test bed / local provider); read by the nodepool-controller and the upgrader. */
  kubeconfig: 'value',
} as const;

/** HTTP headers of the `/ignition` request the stub makes (Flow 2). Written by the nodepool-controller into
 * the stub; read by the ignition-server. */
export const IGNITION_HEADERS = {
  nodePool: 'NodePool',
  targetConfigVersionHash: 'TargetConfigVersionHash',
  /** `omit`: serve the payload without the pool's join material. Sent by the inplace-upgrader, whose nodes
   * joined long ago (a live bootstrap token has no business in a guest payload Secret); never by hosts. */
  joinMaterial: 'Kindling-Join',
} as const;

/** Response header of every refused `/ignition` request: the error code (docs/errors.md), also the body's first
 * word. Written by the ignition-server; read by operators and any client that logs it. */
export const IGNITION_ERROR_HEADER = 'Kindling-Error';

/**
 * Guest bootstrap tokens (Flow 2, joining). Every token Kindling mints carries BOOTSTRAP_GROUP, which the
 * guest RBAC binds to `system:node-bootstrapper` (create CSRs), and its pool's group, which Kindling's CSR
 * approver reads to match a client CSR with a Machine of that pool. Written by the ignition-server into the
 * token's `auth-extra-groups`; the RBAC is applied and the groups read by the nodepool-controller.
 */
export const BOOTSTRAP_GROUP = 'system:bootstrappers:kindling';

/** The bootstrap group of one pool. */
export function bootstrapPoolGroup(namespace: string, pool: string): string {
  return `${BOOTSTRAP_GROUP}:${namespace}:${pool}`;
}

/** The pool (`namespace`, `name`) a bootstrap group names, if it is a Kindling pool group. */
export function poolOfBootstrapGroup(group: string): { namespace: string; name: string } | undefined {
  const m = new RegExp(`^${BOOTSTRAP_GROUP}:([^:]+):([^:]+)$`).exec(group);
  return m ? { namespace: m[1] as string, name: m[2] as string } : undefined;
}

/** Name of the token Secret of a pool at a config hash. */
export function tokenSecretName(pool: string, hash: string): string {
  return `token-${pool}-${hash}`;
}

/** Name of the user-data Secret of a pool at a config hash. */
export function userDataSecretName(pool: string, hash: string): string {
  return `user-data-${pool}-${hash}`;
}

/**
 * The hash a user-data Secret name stands for (`user-data-<pool>-<hash>`), if it is one of the pool's. A
 * ClusterAPI-engine Machine's bootstrap.dataSecretName names the payload its host booted with until its update is
 * over: read by the nodepool-controller (which hash a pool's Machines are at) and the extension (the payload a
 * node never updated in place runs).
 */
export function hashOfUserData(poolName: string, secretName: string | undefined): string | undefined {
  const prefix = userDataSecretName(poolName, '');
  return secretName?.startsWith(prefix) ? secretName.slice(prefix.length) : undefined;
}

/**
 * Name of the KindlingConfigTemplate of a pool at a config hash (ClusterAPI engine): one per hash, so a new
 * hash is a new bootstrap template for Cluster API, which is what makes it ask CanUpdateMachineSet.
 * Written by the nodepool-controller; read by Cluster API (cloned per Machine) and by the nodepool-controller.
 */
export function bootstrapTemplateName(pool: string, hash: string): string {
  return `${pool}-${hash}`;
}

/** The hash a bootstrap template name of the pool stands for, if it is one. */
export function hashOfBootstrapTemplate(pool: string, name: string | undefined): string | undefined {
  const prefix = bootstrapTemplateName(pool, '');
  if (!name?.startsWith(prefix)) return undefined;
  const hash = name.slice(prefix.length);
  return /^[a-z0-9]+$/.test(hash) ? hash : undefined;
}

/** Name of the CAPI kubeconfig Secret of a Cluster. */
export function kubeconfigSecretName(cluster: string): string {
  return `${cluster}-kubeconfig`;
}

/**
 * Scale from zero: the cluster autoscaler cannot look at a node of a pool that has none, so a pool with
 * autoScaling.min 0 tells it on the MachineSet/MachineDeployment what one node would offer (its capacity
 * annotations, as HyperShift writes them). The capacity comes from the infrastructure template's
 * status.capacity (Cluster API's opt-in autoscaling-from-zero contract) when it reports one, else from
 * spec.autoScaling.capacity; the labels and taints are the pool's own.
 */
import { ANNOTATIONS } from '../../api/src/keys.js';
import type { NodeCapacity, NodePool } from '../../api/src/nodepool.js';

/** An infrastructure template's status.capacity: resource name → quantity ("cpu", "memory", "nvidia.com/gpu"). */
export type TemplateCapacity = Record<string, string>;

type CapacitySource = 'InfrastructureTemplate' | 'Spec';

export interface ScaleFromZero {
  /** Absent: neither the template nor the spec says what a node offers. */
  source?: CapacitySource;
  annotations: Record<string, string>;
  /** For the AutoscalingEnabled condition. */
  message: string;
}

/** Extended resources the autoscaler's Cluster API provider counts as GPUs. */
const isGpu = (resource: string): boolean => resource.endsWith('/gpu');

function fromTemplate(capacity: TemplateCapacity): NodeCapacity {
  const gpu = Object.keys(capacity).filter(isGpu).sort()[0];
  const count = gpu === undefined ? undefined : Number(capacity[gpu]);
  return {
    ...(capacity['cpu'] === undefined ? {} : { cpu: capacity['cpu'] }),
    ...(capacity['memory'] === undefined ? {} : { memory: capacity['memory'] }),
    ...(gpu === undefined || !Number.isInteger(count) ? {} : { gpuType: gpu, gpuCount: count }),
  };
}

const reports = (c: NodeCapacity | undefined): c is NodeCapacity =>
  c !== undefined && (c.cpu !== undefined || c.memory !== undefined);

function capacityAnnotations(pool: NodePool, c: NodeCapacity): Record<string, string> {
  const labels = Object.entries(pool.spec.nodeLabels ?? {}).map(([k, v]) => `${k}=${v}`);
  const taints = (pool.spec.taints ?? []).map((t) => `${t.key}=${t.value ?? ''}:${t.effect}`);
  const entries: [string, string | number | undefined][] = [
    [ANNOTATIONS.autoscalerCapacityCpu, c.cpu],
    [ANNOTATIONS.autoscalerCapacityMemory, c.memory],
    [ANNOTATIONS.autoscalerCapacityGpuCount, c.gpuCount],
    [ANNOTATIONS.autoscalerCapacityGpuType, c.gpuType],
    [ANNOTATIONS.autoscalerCapacityLabels, labels.length > 0 ? labels.join(',') : undefined],
    [ANNOTATIONS.autoscalerCapacityTaints, taints.length > 0 ? taints.join(',') : undefined],
  ];
  return Object.fromEntries(entries.flatMap(([k, v]) => (v === undefined ? [] : [[k, String(v)]])));
}

const describe = (c: NodeCapacity): string =>
  [
    c.cpu && `cpu ${c.cpu}`,
    c.memory && `memory ${c.memory}`,
    c.gpuCount !== undefined && `${c.gpuCount} ${c.gpuType ?? 'GPU'}`,
  ]
    .filter(Boolean)
    .join(', ');

/** The capacity annotations of a pool that may scale to zero, and where they came from; none otherwise.
 * `unreadable`: why the template could not be read, which the message then gives instead of "reports none". */
export function scaleFromZero(
  pool: NodePool,
  template: TemplateCapacity | undefined,
  unreadable?: string,
): ScaleFromZero | undefined {
  if (pool.spec.autoScaling?.min !== 0) return undefined;
  const ref = pool.spec.platform.infrastructureTemplateRef;
  const absent = `${ref.kind} ${ref.name} ${unreadable === undefined ? 'reports no capacity' : `cannot be read (${unreadable})`}`;
  const fromRef = template ? fromTemplate(template) : undefined;
  if (reports(fromRef))
    return {
      source: 'InfrastructureTemplate',
      annotations: capacityAnnotations(pool, fromRef),
      message: `capacity for scaling from zero from ${ref.kind} ${ref.name}'s status (${describe(fromRef)})`,
    };
  const spec = pool.spec.autoScaling.capacity;
  if (reports(spec))
    return {
      source: 'Spec',
      annotations: capacityAnnotations(pool, spec),
      message: `capacity for scaling from zero from spec.autoScaling.capacity (${describe(spec)}), as ${absent}`,
    };
  return {
    annotations: {},
    message: `${absent} and spec.autoScaling.capacity is not set: the cluster autoscaler cannot scale the pool up from zero`,
  };
}

const CAPACITY_KEYS: readonly string[] = [
  ANNOTATIONS.autoscalerCapacityCpu,
  ANNOTATIONS.autoscalerCapacityMemory,
  ANNOTATIONS.autoscalerCapacityGpuCount,
  ANNOTATIONS.autoscalerCapacityGpuType,
  ANNOTATIONS.autoscalerCapacityLabels,
  ANNOTATIONS.autoscalerCapacityTaints,
];

/**
 * A template that could not be read this time keeps the capacity the live child already carries: one failed
 * read must not take from the autoscaler what it scales the pool from zero with (the message still says why).
 */
export function keepLiveCapacity(
  computed: ScaleFromZero | undefined,
  live: Record<string, string> | undefined,
): ScaleFromZero | undefined {
  const kept = Object.fromEntries(Object.entries(live ?? {}).filter(([k]) => CAPACITY_KEYS.includes(k)));
  if (!computed || Object.keys(kept).length === 0) return computed;
  return { ...computed, annotations: kept };
}

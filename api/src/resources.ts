/**
 * Every custom resource Kindling lists, watches or writes, declared once (as controller-runtime derives a watch
 * from a type): the watch path, the list and the apiVersion come from here (customResource in
 * support/src/namespaced-informer.ts), never from a group, version and plural spelled again.
 */
import { BOOTSTRAP_GROUP_NAME, KINDLING_CONFIG_KIND, KINDLING_CONFIG_TEMPLATE_KIND } from './bootstrap.js';
import { CAPI_GROUP, CAPI_VERSION } from './capi.js';
import { NODEPOOL_GROUP, NODEPOOL_KIND, NODEPOOL_PLURAL, NODEPOOL_VERSION } from './nodepool.js';

export interface ResourceType {
  group: string;
  version: string;
  plural: string;
  kind: string;
}

const capi = (plural: string, kind: string): ResourceType => ({
  group: CAPI_GROUP,
  version: CAPI_VERSION,
  plural,
  kind,
});
const bootstrap = (plural: string, kind: string): ResourceType => ({
  group: BOOTSTRAP_GROUP_NAME,
  version: 'v1beta1',
  plural,
  kind,
});

export const RESOURCES = {
  nodePools: { group: NODEPOOL_GROUP, version: NODEPOOL_VERSION, plural: NODEPOOL_PLURAL, kind: NODEPOOL_KIND },
  machines: capi('machines', 'Machine'),
  machineSets: capi('machinesets', 'MachineSet'),
  machineDeployments: capi('machinedeployments', 'MachineDeployment'),
  machineHealthChecks: capi('machinehealthchecks', 'MachineHealthCheck'),
  kindlingConfigs: bootstrap('kindlingconfigs', KINDLING_CONFIG_KIND),
  kindlingConfigTemplates: bootstrap('kindlingconfigtemplates', KINDLING_CONFIG_TEMPLATE_KIND),
} as const satisfies Record<string, ResourceType>;

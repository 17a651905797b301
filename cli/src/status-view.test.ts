import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ANNOTATIONS } from '../../api/src/keys.js';
import type { Condition } from '../../api/src/conditions.js';
import { condition as cond } from '../../api/testing/conditions.js';
import type { MachineSet } from '../../api/src/capi.js';
import type * as k8s from '#k8s';
import { formatStatus, isFine, type PoolObjects, nodeProgress, poolStatusView, progressBar } from './status-view.js';
import { assertGoldenText, configMap, guestNode, KUBELET, world } from '../testing/index.js';

import type { Condition, ConditionReason, ConditionType, TypedCondition } from '../src/conditions.js';

/** A NodePool condition for a test, its reason checked against its type's reasons. */
export const condition = <T extends ConditionType>(
  type: T,
  status: Condition['status'],
  reason: ConditionReason<T>,
  message = '',
): Condition =>
  // One member of the Condition union; TypeScript cannot pick which for a generic T.
  ({ type, status, reason, message, lastTransitionTime: '2026-11-23T10:00:00Z' }) as TypedCondition<T> as Condition;

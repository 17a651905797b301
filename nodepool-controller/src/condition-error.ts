/**
 * A terminal error that names the condition it sets and one of that condition's reasons, so the phase that
 * catches it writes a reason of the table (api/src/conditions.ts) and nothing else.
 */
import type { ConditionReason, ConditionType } from '../../api/src/conditions.js';
import { TerminalError } from '../../support/src/errors.js';

export class ConditionError<T extends ConditionType> extends TerminalError {
  constructor(
    message: string,
    readonly condition: T,
    override readonly reason: ConditionReason<T>,
    options?: ErrorOptions,
  ) {
    super(message, reason, options);
  }
}

/** `err` is a ConditionError for `condition` (a type guard: TypeScript cannot narrow a generic class by instanceof). */
export function isConditionError<T extends ConditionType>(err: unknown, condition: T): err is ConditionError<T> {
  return err instanceof ConditionError && err.condition === condition;
}

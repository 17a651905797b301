/**
 * The JSON Schema keywords cli/plan.schema.json uses (type, enum, required, properties,
 * additionalProperties: false, items, minimum), checked without a validator dependency. For tests.
 */
export interface Schema {
  type?: string;
  enum?: unknown[];
  required?: string[];
  properties?: Record<string, Schema>;
  additionalProperties?: boolean;
  items?: Schema;
  minimum?: number;
}

function typeOf(value: unknown): string {
  if (Array.isArray(value)) return 'array';
  if (value === null) return 'null';
  if (typeof value === 'number') return Number.isInteger(value) ? 'integer' : 'number';
  return typeof value;
}

function objectErrors(schema: Schema, value: Record<string, unknown>, at: string): string[] {
  const errors = (schema.required ?? []).filter((k) => !(k in value)).map((k) => `${at}: ${k} is required`);
  for (const [k, v] of Object.entries(value)) {
    const sub = schema.properties?.[k];
    if (sub) errors.push(...validate(sub, v, `${at}.${k}`));
    else if (schema.additionalProperties === false) errors.push(`${at}: ${k} is not allowed`);
  }
  return errors;
}

/** The scalar keywords: type, enum, minimum. */
function scalarError(schema: Schema, value: unknown, at: string): string | undefined {
  const type = typeOf(value);
  if (schema.type && schema.type !== type && !(schema.type === 'number' && type === 'integer'))
    return `${at}: ${type} is not ${schema.type}`;
  if (schema.enum && !schema.enum.includes(value))
    return `${at}: ${JSON.stringify(value)} is not one of ${JSON.stringify(schema.enum)}`;
  if (schema.minimum !== undefined && typeof value === 'number' && value < schema.minimum)
    return `${at}: ${value} < ${schema.minimum}`;
  return undefined;
}

/** Every way `value` breaks `schema` (empty when it conforms). */
export function validate(schema: Schema, value: unknown, at = '$'): string[] {
  const error = scalarError(schema, value, at);
  if (error) return [error];
  const type = typeOf(value);
  if (type === 'array' && schema.items)
    return (value as unknown[]).flatMap((v, i) => validate(schema.items as Schema, v, `${at}[${i}]`));
  if (type === 'object') return objectErrors(schema, value as Record<string, unknown>, at);
  return [];
}

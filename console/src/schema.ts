// Reading the pipeline JSON Schema (GET /api/schema) to generate forms: resolve $refs into
// $defs, pick a task type's definition by its discriminator, classify each property into an
// input kind.
export type JsonSchema = {
  $ref?: string;
  $defs?: Record<string, JsonSchema>;
  type?: string | string[];
  const?: unknown;
  enum?: unknown[];
  title?: string;
  description?: string;
  default?: unknown;
  properties?: Record<string, JsonSchema>;
  required?: string[];
  items?: JsonSchema;
  anyOf?: JsonSchema[];
  oneOf?: JsonSchema[];
  discriminator?: { propertyName: string; mapping?: Record<string, string> };
  minimum?: number;
  maximum?: number;
  pattern?: string;
  [k: string]: unknown;
};

export function resolve(root: JsonSchema, s: JsonSchema | undefined, depth = 0): JsonSchema {
  if (!s) return {};
  if (s.$ref && depth < 20) {
    const m = /^#\/(\$defs|definitions)\/(.+)$/.exec(s.$ref);
    const target = m ? ((root[m[1]] as Record<string, JsonSchema> | undefined)?.[decodeURIComponent(m[2])] ?? {}) : {};
    const { $ref: _ref, ...rest } = s;
    return { ...resolve(root, target, depth + 1), ...rest };
  }
  return s;
}

/** The task types and their definitions, from tasks.items' discriminator (or the oneOf consts). */
export function taskTypes(root: JsonSchema): Record<string, JsonSchema> {
  const items = resolve(root, resolve(root, root.properties?.tasks).items);
  const out: Record<string, JsonSchema> = {};
  const mapping = items.discriminator?.mapping;
  if (mapping) {
    for (const [t, ref] of Object.entries(mapping)) out[t] = resolve(root, { $ref: ref });
    return out;
  }
  for (const alt of items.oneOf ?? items.anyOf ?? []) {
    const d = resolve(root, alt);
    const c = resolve(root, d.properties?.type).const;
    if (typeof c === "string") out[c] = d;
  }
  return out;
}

export type FieldKind =
  | { kind: "string" }
  | { kind: "number"; integer: boolean }
  | { kind: "scalar" } // number or string (durations, sizes)
  | { kind: "boolean" }
  | { kind: "enum"; options: unknown[] }
  | { kind: "const"; value: unknown }
  | { kind: "strings" } // array of strings
  | { kind: "structured" }; // objects, arrays of objects, unions: a YAML textarea

export interface Field {
  key: string;
  label: string;
  description?: string;
  default?: unknown;
  required: boolean;
  nullable: boolean;
  schema: JsonSchema;
  kind: FieldKind;
}

function types(s: JsonSchema): string[] {
  return Array.isArray(s.type) ? s.type : s.type ? [s.type] : [];
}

function isNull(s: JsonSchema): boolean {
  return types(s).length === 1 && types(s)[0] === "null";
}

/** Flatten nested anyOf/oneOf alternatives (resolved), without the null alternative. */
function alternatives(root: JsonSchema, s: JsonSchema): { alts: JsonSchema[]; nullable: boolean } {
  const r = resolve(root, s);
  const union = r.anyOf ?? (r.discriminator ? undefined : r.oneOf);
  if (!union) return { alts: [r], nullable: types(r).includes("null") };
  let nullable = false;
  const alts: JsonSchema[] = [];
  for (const a of union) {
    const ra = resolve(root, a);
    if (isNull(ra)) nullable = true;
    else {
      const sub = alternatives(root, ra);
      nullable ||= sub.nullable;
      alts.push(...sub.alts);
    }
  }
  return { alts, nullable };
}

function kindOf(root: JsonSchema, alts: JsonSchema[]): FieldKind {
  if (alts.length === 1) {
    const s = alts[0];
    if (s.const !== undefined) return { kind: "const", value: s.const };
    if (Array.isArray(s.enum)) return { kind: "enum", options: s.enum };
    const t = types(s).filter((x) => x !== "null");
    if (t.length === 1) {
      if (t[0] === "string") return { kind: "string" };
      if (t[0] === "integer" || t[0] === "number") return { kind: "number", integer: t[0] === "integer" };
      if (t[0] === "boolean") return { kind: "boolean" };
      if (t[0] === "array") {
        const items = alternatives(root, s.items ?? {}).alts;
        if (items.length === 1 && types(items[0]).includes("string") && !items[0].enum) return { kind: "strings" };
      }
    }
    return { kind: "structured" };
  }
  const all = alts.map((a) => types(a)).flat();
  if (alts.every((a) => types(a).length === 1 && !a.enum && a.const === undefined) &&
      all.every((t) => t === "string" || t === "number" || t === "integer")) {
    return all.every((t) => t === "string") ? { kind: "string" } : { kind: "scalar" };
  }
  return { kind: "structured" };
}

/** The form fields of an object schema, in its properties' order. */
export function fields(root: JsonSchema, objectSchema: JsonSchema): Field[] {
  const obj = resolve(root, objectSchema);
  const required = new Set(obj.required ?? []);
  return Object.entries(obj.properties ?? {}).map(([key, raw]) => {
    const r = resolve(root, raw);
    const { alts, nullable } = alternatives(root, r);
    const inner = alts.length === 1 ? alts[0] : {};
    const description =
      r.description ?? inner.description ?? alts.map((a) => a.description).find((d) => !!d) ?? undefined;
    return {
      key,
      label: r.title ?? inner.title ?? key,
      description,
      default: r.default !== undefined ? r.default : inner.default,
      required: required.has(key),
      nullable,
      schema: r,
      kind: kindOf(root, alts),
    };
  });
}

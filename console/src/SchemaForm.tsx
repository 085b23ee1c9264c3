// A form generated from the pipeline JSON Schema for one object (a task, or the pipeline's top
// level): string/number/boolean/enum inputs, arrays of strings as lists (one a line, or comma
// separated), and anything nested as a small YAML text area. Each committed change calls
// onSet(key, value) (value null = delete the key), which the editor sends as a `set` op.
import { useEffect, useId, useState } from "react";
import YAML from "yaml";
import type { Issue } from "./api";
import { type Field, type JsonSchema, fields as schemaFields } from "./schema";

interface Props {
  root: JsonSchema;
  schema: JsonSchema;
  value: Record<string, unknown>;
  skip?: string[];
  issues: Record<string, Issue[]>; // by top-level key of this object
  onSet(key: string, value: unknown): void;
}

function same(a: unknown, b: unknown) {
  return JSON.stringify(a) === JSON.stringify(b);
}

function show(v: unknown): string {
  if (v === undefined || v === null) return "";
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}

function parseNumber(text: string): unknown {
  const t = text.trim();
  if (t === "") return null;
  const n = Number(t);
  return Number.isFinite(n) ? n : t; // not a number: send it, the validator says why
}

function parseScalar(text: string): unknown {
  const t = text.trim();
  if (t === "") return null;
  return /^-?\d+(\.\d+)?$/.test(t) ? Number(t) : t;
}

function parseList(text: string): string[] | null {
  const parts = (text.includes("\n") ? text.split("\n") : text.split(",")).map((s) => s.trim()).filter(Boolean);
  return parts.length ? parts : null;
}

function toYaml(v: unknown): string {
  if (v === undefined) return "";
  return YAML.stringify(v, { lineWidth: 0, flowCollectionPadding: false }).replace(/\n$/, "");
}

function FieldInput({ field, value, id, invalid, onSet }: { field: Field; value: unknown; id: string; invalid: boolean; onSet(v: unknown): void }) {
  const k = field.kind;
  const initial =
    k.kind === "strings"
      ? Array.isArray(value) ? value.map(String).join("\n") : show(value)
      : k.kind === "structured"
        ? toYaml(value)
        : show(value);
  const [text, setText] = useState(initial);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    setText(initial);
    setError(null);
  }, [initial]);

  const commit = (next: unknown) => {
    if (!same(next ?? null, value ?? null)) onSet(next);
  };
  const common = { id, "aria-invalid": invalid || !!error || undefined, "aria-describedby": `${id}-help` };
  const placeholder = field.default !== undefined && field.default !== null && show(field.default) !== "" ? `default: ${show(field.default)}` : "";

  switch (k.kind) {
    case "const":
      return <input {...common} value={show(value ?? k.value)} readOnly className="ro" />;
    case "boolean": {
      const checked = value === undefined || value === null ? field.default === true : value === true;
      return (
        <input
          {...common}
          type="checkbox"
          checked={checked}
          onChange={(e) => commit(e.target.checked)}
        />
      );
    }
    case "enum":
      return (
        <select {...common} value={value === undefined || value === null ? "" : show(value)} onChange={(e) => {
          const opt = k.options.find((o) => show(o) === e.target.value);
          commit(e.target.value === "" ? null : opt);
        }}>
          <option value="">{field.default !== undefined && field.default !== null ? `(default: ${show(field.default)})` : "(unset)"}</option>
          {k.options.map((o) => (
            <option key={show(o)} value={show(o)}>
              {show(o)}
            </option>
          ))}
        </select>
      );
    case "strings":
    case "structured": {
      const rows = Math.min(10, Math.max(2, text.split("\n").length));
      return (
        <>
          <textarea
            {...common}
            className={k.kind === "structured" ? "mono" : undefined}
            rows={rows}
            value={text}
            spellCheck={false}
            placeholder={k.kind === "strings" ? "one a line (or comma separated)" : "YAML"}
            onChange={(e) => setText(e.target.value)}
            onBlur={() => {
              if (text === initial) return;
              if (k.kind === "strings") return commit(parseList(text));
              try {
                commit(text.trim() === "" ? null : YAML.parse(text));
                setError(null);
              } catch (e) {
                setError(`not YAML: ${(e as Error).message.split("\n")[0]}`);
              }
            }}
          />
          {error && <div className="field-error">{error}</div>}
        </>
      );
    }
    default: {
      const parse = k.kind === "number" ? parseNumber : k.kind === "scalar" ? parseScalar : (t: string) => (t === "" && !field.required ? null : t);
      return (
        <input
          {...common}
          type="text"
          inputMode={k.kind === "number" ? (k.integer ? "numeric" : "decimal") : undefined}
          value={text}
          placeholder={placeholder}
          spellCheck={false}
          onChange={(e) => setText(e.target.value)}
          onBlur={() => text !== initial && commit(parse(text))}
          onKeyDown={(e) => {
            if (e.key === "Enter") (e.target as HTMLInputElement).blur();
            if (e.key === "Escape") setText(initial);
          }}
        />
      );
    }
  }
}

export function SchemaForm({ root, schema, value, skip = [], issues, onSet }: Props) {
  const base = useId();
  const list = schemaFields(root, schema).filter((f) => !skip.includes(f.key));
  return (
    <div className="schema-form">
      {list.map((f) => {
        const id = `${base}-${f.key}`;
        const v = value[f.key];
        const errs = issues[f.key] ?? [];
        const present = Object.prototype.hasOwnProperty.call(value, f.key);
        return (
          <div className={`field k-${f.kind.kind}${errs.length ? " invalid" : ""}`} key={f.key} data-field={f.key}>
            <div className="field-label">
              <label htmlFor={id}>
                {f.label}
                {f.required && <span className="req" aria-label="required"> *</span>}
              </label>
              <code className="field-key">{f.key}</code>
              {present && !f.required && (
                <button type="button" className="link small" title={`remove ${f.key} (use the default)`} onClick={() => onSet(f.key, null)}>
                  reset
                </button>
              )}
            </div>
            <FieldInput field={f} value={v} id={id} invalid={errs.length > 0} onSet={(nv) => onSet(f.key, nv)} />
            {errs.map((e, i) => (
              <div className="field-error" key={i} role="alert">
                {e.field ? <code>{e.field}</code> : null} {e.message}
                {e.hint ? <div className="hint">{e.hint}</div> : null}
              </div>
            ))}
            <div className="help" id={`${id}-help`}>
              {f.description}
            </div>
          </div>
        );
      })}
    </div>
  );
}

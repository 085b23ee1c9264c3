// One open pipeline: the editor (graph + form beside the YAML, issues), history and runs.
// Every edit goes through POST /preview (ops applied server-side by the round-trip editor,
// validated by `stepcrawl validate`'s validator); saves carry If-Match and meet 409s.
import { useCallback, useEffect, useMemo, useRef, useState } from "react";
import YAML from "yaml";
import {
  ApiError,
  type Conflict,
  type Graph,
  type Info,
  type Issue,
  type Op,
  type Pipeline,
  type Version,
  api,
  vlabel,
} from "./api";
import { GraphView } from "./GraphView";
import { HistoryPanel } from "./HistoryPanel";
import { RunsPanel } from "./RunsPanel";
import { SchemaForm } from "./SchemaForm";
import { type JsonSchema, taskTypes } from "./schema";
import { DiffView, Modal } from "./ui";
import { YamlEditor, type YamlEditorHandle } from "./YamlEditor";

export type Tab = "editor" | "history" | "runs";

export interface PipelineEvent {
  name: string;
  version: Version;
  source?: string;
  seq: number;
}

interface Draft {
  text: string;
  base: Version;
  saved: string;
}

/** Unsaved edits of pipelines not on screen, kept for this page's life. */
const drafts = new Map<string, Draft>();

interface Props {
  name: string;
  info: Info;
  schema: JsonSchema | null;
  tab: Tab;
  run: string | null;
  event: PipelineEvent | null;
  onTab(tab: Tab, run?: string | null): void;
  onSaved(): void;
  onDirty(name: string, dirty: boolean): void;
}

const EMPTY_GRAPH: Graph = { nodes: [], edges: [], schedule: null };

function taskIndexToId(doc: unknown): (i: number) => string | undefined {
  const tasks = (doc as { tasks?: unknown })?.tasks;
  return (i) => (Array.isArray(tasks) && tasks[i] && typeof tasks[i] === "object" ? String((tasks[i] as { id?: unknown }).id ?? "") || undefined : undefined);
}

export function PipelineView({ name, info, schema, tab, run, event, onTab, onSaved, onDirty }: Props) {
  const [loaded, setLoaded] = useState<Pipeline | null>(null);
  const [loadError, setLoadError] = useState<string | null>(null);
  const [text, setTextState] = useState("");
  const [base, setBase] = useState<Version>("");
  const [saved, setSaved] = useState("");
  const [issues, setIssues] = useState<Issue[]>([]);
  const [valid, setValid] = useState(true);
  const [graph, setGraph] = useState<Graph>(EMPTY_GRAPH);
  const [status, setStatus] = useState<{ kind: "ok" | "error" | "info"; text: string } | null>(null);
  const [busy, setBusy] = useState(false);
  const [conflict, setConflict] = useState<Conflict | null>(null);
  const [newer, setNewer] = useState<Version | null>(null);
  const [selTask, setSelTask] = useState<string | null>(null);
  const [selEdge, setSelEdge] = useState<{ source: string; target: string } | null>(null);
  const [adding, setAdding] = useState(false);
  const [historyKey, setHistoryKey] = useState(0);
  const [parseError, setParseError] = useState<string | null>(null);

  const readOnly = info.read_only || !!loaded?.read_only;
  const dirty = text !== saved;

  // Refs for callbacks that outlive a render (timers, SSE, the op queue).
  const textRef = useRef(text);
  const baseRef = useRef(base);
  const dirtyRef = useRef(dirty);
  const savedRef = useRef(saved);
  baseRef.current = base;
  dirtyRef.current = dirty;
  savedRef.current = saved;
  const seq = useRef(0);
  const debounce = useRef<number | undefined>(undefined);
  const opChain = useRef<Promise<void>>(Promise.resolve());
  const saving = useRef(false);
  const ownVersions = useRef(new Set<string>());
  const editor = useRef<YamlEditorHandle>(null);

  const setText = (t: string) => {
    textRef.current = t;
    setTextState(t);
  };

  const applyResult = (r: { yaml?: string; valid: boolean; issues: Issue[]; graph: Graph }, replaceText: boolean) => {
    if (replaceText && typeof r.yaml === "string") setText(r.yaml);
    setIssues(r.issues ?? []);
    setValid(!!r.valid);
    // Text that does not parse has no graph: keep showing the last one until it parses again.
    const g = r.graph ?? EMPTY_GRAPH;
    if (g.nodes.length || !(r.issues ?? []).some((i) => !i.path?.length)) setGraph(g);
    setParseError(null);
  };

  /** The editor is now based on ``version`` of the file, whose text is ``text``. */
  const rebase = (version: Version, text: string) => {
    setBase(version);
    baseRef.current = version;
    setSaved(text);
    savedRef.current = text;
  };

  const load = useCallback(
    async (why?: string) => {
      try {
        const p = await api.pipeline(name);
        setLoaded(p);
        setLoadError(null);
        rebase(p.version, p.yaml);
        setText(p.yaml);
        applyResult(p, false);
        setNewer(null);
        setConflict(null);
        if (why) setStatus({ kind: "info", text: why.replace("%v", vlabel(p.version)) });
        return p;
      } catch (e) {
        setLoadError((e as Error).message);
        return null;
      }
    },
    // eslint-disable-next-line react-hooks/exhaustive-deps
    [name],
  );

  // Open: load, then bring back this pipeline's unsaved draft if there is one.
  useEffect(() => {
    let live = true;
    setLoaded(null);
    setStatus(null);
    setSelTask(null);
    setSelEdge(null);
    void load().then((p) => {
      if (!live || !p) return;
      const d = drafts.get(name);
      drafts.delete(name);
      if (d && d.text !== p.yaml) {
        setText(d.text);
        if (String(d.base) !== String(p.version)) {
          rebase(d.base, d.saved);
          setNewer(p.version);
        }
        setStatus({ kind: "info", text: "unsaved edits restored" });
        void preview();
      }
    });
    return () => {
      live = false;
      window.clearTimeout(debounce.current);
      if (textRef.current !== savedRef.current) drafts.set(name, { text: textRef.current, base: baseRef.current, saved: savedRef.current });
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [name]);

  useEffect(() => onDirty(name, dirty), [name, dirty, onDirty]);

  /** Validate the editor's text as it is (no ops): refresh the graph and the issues. */
  const preview = async () => {
    window.clearTimeout(debounce.current);
    const mine = ++seq.current;
    const sent = textRef.current;
    try {
      const r = await api.preview(name, sent);
      if (mine === seq.current && textRef.current === sent) applyResult(r, false);
    } catch (e) {
      if (mine !== seq.current) return;
      const err = e as ApiError;
      if (err.status === 422) {
        setIssues(err.issues);
        setValid(false);
        setParseError(err.message);
      } else setStatus({ kind: "error", text: err.message });
    }
  };

  const onType = (t: string) => {
    setText(t);
    window.clearTimeout(debounce.current);
    debounce.current = window.setTimeout(() => void preview(), 400);
  };

  /** Apply ops (queued, one request at a time): the answer's YAML replaces the editor text. */
  const applyOps = (ops: Op[]) => {
    window.clearTimeout(debounce.current);
    opChain.current = opChain.current.then(async () => {
      ++seq.current; // an older no-op preview's answer is stale now
      setBusy(true);
      try {
        const r = await api.preview(name, textRef.current, ops);
        applyResult(r, true);
      } catch (e) {
        const err = e as ApiError;
        if (err.issues.length) setIssues(err.issues);
        setStatus({ kind: "error", text: err.message });
      } finally {
        setBusy(false);
      }
    });
    return opChain.current;
  };

  /** Leave the conflict on the current version, with ``text`` in the editor. */
  const adoptCurrent = (c: Conflict, text: string, message: { kind: "info" | "error"; text: string }) => {
    setConflict(null);
    rebase(c.current_version, c.current_yaml);
    setText(text);
    setNewer(null);
    setStatus(message);
    void preview();
  };

  const save = async (ifMatch?: Version) => {
    if (readOnly || saving.current) return;
    await opChain.current;
    window.clearTimeout(debounce.current);
    const body = textRef.current;
    const from = ifMatch ?? baseRef.current;
    saving.current = true;
    setBusy(true);
    try {
      const r = await api.save(name, body, from);
      ownVersions.current.add(String(r.version));
      rebase(r.version, body);
      setConflict(null);
      setNewer(null);
      setStatus({ kind: "ok", text: `saved ${vlabel(r.version)}` });
      setHistoryKey((k) => k + 1);
      onSaved();
      void preview();
    } catch (e) {
      const err = e as ApiError;
      if (err.status === 409) {
        setConflict(err.body as unknown as Conflict);
        setStatus({ kind: "error", text: `not saved: ${vlabel(String(err.body.current_version ?? ""))} was saved meanwhile` });
      } else if (err.status === 422) {
        setIssues(err.issues);
        setValid(false);
        setStatus({ kind: "error", text: `not saved: ${err.issues.length || "the"} issue${err.issues.length === 1 ? "" : "s"} to fix (${err.message})` });
      } else setStatus({ kind: "error", text: `not saved: ${err.message}` });
    } finally {
      saving.current = false;
      setBusy(false);
    }
  };

  // A new version from elsewhere (SSE): reload when nothing is unsaved, else offer to.
  useEffect(() => {
    if (!event || event.name !== name || !loaded) return;
    const v = String(event.version);
    if (v === String(baseRef.current) || ownVersions.current.has(v) || saving.current) return;
    setHistoryKey((k) => k + 1);
    if (!dirtyRef.current) void load(`reloaded: %v was saved elsewhere`);
    else setNewer(event.version);
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [event]);

  // The document as parsed here, for the form (the last one that parsed while typing).
  const lastDoc = useRef<unknown>(null);
  const doc = useMemo(() => {
    try {
      lastDoc.current = YAML.parse(text) ?? {};
    } catch {
      /* keep the last good one */
    }
    return lastDoc.current as Record<string, unknown> | null;
  }, [text]);
  const idAt = taskIndexToId(doc);

  // Issues by task id and by field, for the graph's badges and the form.
  const { byTask, byTaskField, topField } = useMemo(() => {
    const byTask: Record<string, number> = {};
    const byTaskField: Record<string, Record<string, Issue[]>> = {};
    const topField: Record<string, Issue[]> = {};
    for (const i of issues) {
      const p = i.path ?? [];
      if (p[0] === "tasks" && p.length > 1) {
        const id = typeof p[1] === "number" ? idAt(p[1]) : String(p[1]);
        if (!id) continue;
        byTask[id] = (byTask[id] ?? 0) + 1;
        const key = String(p[2] ?? "");
        ((byTaskField[id] ??= {})[key] ??= []).push(i);
      } else if (p.length) {
        (topField[String(p[0])] ??= []).push(i);
      }
    }
    return { byTask, byTaskField, topField };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [issues, doc]);

  const types = useMemo(() => (schema ? taskTypes(schema) : {}), [schema]);
  const tasks = (Array.isArray(doc?.tasks) ? doc!.tasks : []) as Record<string, unknown>[];
  const task = selTask ? tasks.find((t) => t && t.id === selTask) : undefined;
  useEffect(() => {
    if (selTask && !graph.nodes.some((n) => n.id === selTask)) setSelTask(null);
  }, [graph, selTask]);

  const download = () => {
    const blob = new Blob([textRef.current], { type: "application/yaml" });
    const a = document.createElement("a");
    a.href = URL.createObjectURL(blob);
    a.download = loaded?.file || `${name}.yaml`;
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 1000);
  };

  if (loadError && !loaded)
    return (
      <div className="pad">
        <div className="alert error">{loadError}</div>
        <button type="button" onClick={() => load()}>
          Retry
        </button>
      </div>
    );
  if (!loaded) return <p className="muted pad">Loading {name}…</p>;

  return (
    <div className="pipeline">
      <header className="pipe-head">
        <div className="pipe-title">
          <h1>{name}</h1>
          <span className={`badge ${valid ? "ok" : "bad"}`}>{valid ? "valid" : `${issues.length} issue${issues.length === 1 ? "" : "s"}`}</span>
          {graph.schedule && (
            <span className="badge plain" title="schedule">
              schedule {graph.schedule}
            </span>
          )}
          {readOnly && <span className="badge warn">read-only</span>}
          <span className="muted small">{loaded.file}</span>
        </div>
        <nav className="tabs" role="tablist" aria-label="Pipeline views">
          {(["editor", "history", "runs"] as Tab[]).map((t) => (
            <button
              key={t}
              type="button"
              role="tab"
              aria-selected={tab === t}
              className={tab === t ? "active" : ""}
              onClick={() => onTab(t)}
              data-testid={`tab-${t}`}
            >
              {t === "editor" ? "Editor" : t === "history" ? "History" : "Runs"}
            </button>
          ))}
        </nav>
      </header>

      {newer && (
        <div className="banner" role="alert" data-testid="new-version">
          <span>
            A newer version ({vlabel(newer)}) was saved{dirty ? " while you were editing" : ""}.
          </span>
          <button type="button" className="small primary" onClick={() => load(`reloaded %v`)}>
            Reload
          </button>
          <button type="button" className="small" onClick={() => setNewer(null)}>
            Keep editing
          </button>
        </div>
      )}
      {readOnly && tab === "editor" && (
        <div className="banner info">
          <span>
            Read-only: this stage’s pipelines are deployed from git. Edit here, <b>Download</b> the file, commit it to git and run{" "}
            <code>cdk deploy</code>.
          </span>
        </div>
      )}

      <div className={`tab-body${tab === "editor" ? "" : " hidden"}`} hidden={tab !== "editor"}>
        <div className="toolbar">
          <span className="version" data-testid="version" title="the version this editor is based on">
            {vlabel(base)}
          </span>
          {dirty ? (
            <span className="dirty" data-testid="dirty">
              ● unsaved
            </span>
          ) : null}
          <span className="status-slot">
            {status && (
              <span className={`status ${status.kind}`} role="status" data-testid="status" title={status.text}>
                {status.text}
              </span>
            )}
            {busy && <span className="muted small"> working…</span>}
          </span>
          <button type="button" className="small" onClick={() => setAdding(true)} data-testid="add-task">
            + Add task
          </button>
          <button
            type="button"
            className="small"
            disabled={!selTask}
            onClick={() => selTask && applyOps([{ op: "remove_task", id: selTask }]).then(() => setSelTask(null))}
            data-testid="remove-task"
          >
            Remove task
          </button>
          <button
            type="button"
            className="small"
            disabled={!selEdge}
            onClick={() => selEdge && applyOps([{ op: "disconnect", ...selEdge }]).then(() => setSelEdge(null))}
            data-testid="remove-edge"
          >
            Remove dependency
          </button>
          <span className="sep" />
          <button type="button" className="small" disabled={!dirty} onClick={() => load("reverted to %v")} data-testid="revert">
            Revert
          </button>
          <button type="button" className={`small${readOnly ? " primary" : ""}`} onClick={download} data-testid="download">
            Download
          </button>
          {!readOnly && (
            <button type="button" className="primary" disabled={!dirty || busy} onClick={() => save()} data-testid="save" title="Save (Ctrl+S)">
              Save
            </button>
          )}
        </div>

        <div className="editor-grid">
          <div className="left">
            <GraphView
              graph={graph}
              issuesByTask={byTask}
              selectedTask={selTask}
              onSelect={({ task, edge }) => {
                setSelTask(task);
                setSelEdge(edge);
              }}
              onConnect={(source, target) => void applyOps([{ op: "connect", source, target }])}
              onDelete={(ids, edges) => {
                const ops: Op[] = [...edges.map((e) => ({ op: "disconnect" as const, ...e })), ...ids.map((id) => ({ op: "remove_task" as const, id }))];
                if (ops.length) void applyOps(ops).then(() => (setSelTask(null), setSelEdge(null)));
              }}
            />
            <section className="inspector" aria-label="Selected task" data-testid="inspector">
              {!schema ? (
                <p className="muted">Loading the schema…</p>
              ) : task && selTask ? (
                <>
                  <h2>
                    <code>{selTask}</code> <span className={`type-badge t-${String(task.type)}`}>{String(task.type)}</span>
                  </h2>
                  {types[String(task.type)] ? (
                    <>
                      {types[String(task.type)].description && <p className="muted small">{types[String(task.type)].description}</p>}
                      <SchemaForm
                        key={selTask}
                        root={schema}
                        schema={types[String(task.type)]}
                        value={task}
                        skip={["id", "type"]}
                        issues={byTaskField[selTask] ?? {}}
                        onSet={(key, value) => void applyOps([{ op: "set", path: ["tasks", selTask, key], value }])}
                      />
                    </>
                  ) : (
                    <p className="muted">Unknown task type “{String(task.type)}”: edit it in the YAML.</p>
                  )}
                </>
              ) : (
                <>
                  <h2>Pipeline settings</h2>
                  <p className="muted small">Select a task on the graph to edit its fields.</p>
                  <SchemaForm
                    root={schema}
                    schema={schema}
                    value={(doc ?? {}) as Record<string, unknown>}
                    skip={["name", "tasks"]}
                    issues={topField}
                    onSet={(key, value) => void applyOps([{ op: "set", path: [key], value }])}
                  />
                </>
              )}
            </section>
          </div>
          <div className="right">
            <YamlEditor ref={editor} value={text} issues={issues} onChange={onType} onSave={() => void save()} />
            <section className="issues" aria-label="Issues" data-testid="issues">
              <h2>
                Issues <span className={`badge ${issues.length ? "bad" : "ok"}`}>{issues.length}</span>
                {parseError && <span className="status error small"> {parseError}</span>}
              </h2>
              {issues.length === 0 ? (
                <p className="muted small">No issues: the pipeline validates.</p>
              ) : (
                <ul>
                  {issues.map((i, n) => {
                    const taskId = i.path?.[0] === "tasks" ? (typeof i.path[1] === "number" ? idAt(i.path[1]) : String(i.path[1])) : undefined;
                    return (
                      <li key={n}>
                        <button
                          type="button"
                          className="issue"
                          onClick={() => {
                            if (i.line) editor.current?.goTo(i.line, i.column);
                            if (taskId && graph.nodes.some((x) => x.id === taskId)) setSelTask(taskId);
                          }}
                        >
                          <code className="issue-field">{i.field || "(document)"}</code>
                          {i.line ? <span className="issue-line">line {i.line}</span> : null}
                          <span className="issue-msg">{i.message}</span>
                          {i.hint && <span className="issue-hint">{i.hint}</span>}
                        </button>
                      </li>
                    );
                  })}
                </ul>
              )}
            </section>
          </div>
        </div>
      </div>

      {tab === "history" && (
        <div className="tab-body">
          <HistoryPanel
            name={name}
            base={base}
            dirty={dirty}
            readOnly={readOnly}
            refreshKey={historyKey}
            onRestored={() => {
              setHistoryKey((k) => k + 1);
              void load("restored as %v");
              onSaved();
            }}
            onConflict={(m) => setStatus({ kind: "error", text: m })}
          />
          {status && tab === "history" && status.kind === "error" && <div className="alert error">{status.text}</div>}
        </div>
      )}
      {tab === "runs" && (
        <div className="tab-body">
          <RunsPanel name={name} info={info} run={run} onRun={(r) => onTab("runs", r)} />
        </div>
      )}

      {adding && (
        <AddTaskDialog
          types={Object.keys(types).length ? Object.keys(types) : ["crawl", "transform", "validate", "load"]}
          existing={graph.nodes.map((n) => n.id)}
          after={selTask}
          onClose={() => setAdding(false)}
          onAdd={(t) => {
            setAdding(false);
            void applyOps([{ op: "add_task", task: t }]).then(() => setSelTask(t.id));
          }}
        />
      )}

      {conflict && (
        <Modal
          title="Someone saved this pipeline meanwhile"
          testid="conflict"
          wide
          onClose={() => setConflict(null)}
          footer={
            <>
              <button type="button" onClick={() => setConflict(null)}>
                Cancel
              </button>
              <button
                type="button"
                onClick={() =>
                  adoptCurrent(conflict, conflict.current_yaml, {
                    kind: "info",
                    text: `discarded your edits; now at ${vlabel(conflict.current_version)}`,
                  })
                }
                data-testid="conflict-discard"
              >
                Discard mine
              </button>
              <button
                type="button"
                disabled={conflict.merged === null || conflict.merged === undefined}
                title={conflict.merged == null ? "no merge: the version you started from is not in the history" : undefined}
                onClick={() =>
                  adoptCurrent(
                    conflict,
                    conflict.merged ?? "",
                    conflict.merge_conflicts
                      ? { kind: "error", text: "merged with conflicts: resolve the marked lines, then save" }
                      : { kind: "info", text: `merged onto ${vlabel(conflict.current_version)}: review, then save` },
                  )
                }
                data-testid="conflict-merge"
              >
                Merge
              </button>
              <button type="button" className="danger primary" onClick={() => void save(conflict.current_version)} data-testid="conflict-overwrite">
                Overwrite
              </button>
            </>
          }
        >
          <p>
            You started from <b>{vlabel(conflict.base_version)}</b>; <b>{vlabel(conflict.current_version)}</b> has been saved since. Their changes (
            {vlabel(conflict.base_version)} → {vlabel(conflict.current_version)}):
          </p>
          <DiffView diff={conflict.diff ?? ""} />
          {conflict.merge_conflicts && conflict.merged !== null && (
            <p className="alert warn">The merge has conflicts: both changed the same lines. Merge loads it with conflict markers to resolve.</p>
          )}
          <p className="muted small">
            <b>Overwrite</b> saves your text over theirs · <b>Merge</b> loads the three-way merge into the editor (save after reviewing) ·{" "}
            <b>Discard mine</b> loads their version.
          </p>
        </Modal>
      )}
    </div>
  );
}

function AddTaskDialog({
  types,
  existing,
  after,
  onClose,
  onAdd,
}: {
  types: string[];
  existing: string[];
  after: string | null;
  onClose(): void;
  onAdd(task: { id: string; type: string; depends_on?: string[] }): void;
}) {
  const [id, setId] = useState("");
  const [type, setType] = useState(types.includes("transform") ? "transform" : types[0]);
  const [dep, setDep] = useState(!!after);
  const bad = !/^[a-z][a-z0-9_]{0,47}$/.test(id) ? "lower-case letters, digits and _, starting with a letter" : existing.includes(id) ? "a task has this id already" : null;
  const submit = (e: React.FormEvent) => {
    e.preventDefault();
    if (bad) return;
    onAdd({ id, type, ...(dep && after ? { depends_on: [after] } : {}) });
  };
  return (
    <Modal title="Add a task" onClose={onClose} testid="add-task-dialog">
      <form onSubmit={submit} className="form-grid" id="add-task-form">
        <label htmlFor="new-task-id">id</label>
        <div>
          <input id="new-task-id" value={id} onChange={(e) => setId(e.target.value)} autoFocus spellCheck={false} aria-invalid={!!id && !!bad} data-testid="new-task-id" />
          {id && bad && <div className="field-error">{bad}</div>}
        </div>
        <label htmlFor="new-task-type">type</label>
        <select id="new-task-type" value={type} onChange={(e) => setType(e.target.value)} data-testid="new-task-type">
          {types.map((t) => (
            <option key={t}>{t}</option>
          ))}
        </select>
        {after && (
          <>
            <span />
            <label className="check">
              <input type="checkbox" checked={dep} onChange={(e) => setDep(e.target.checked)} /> after <code>{after}</code> (depends on it)
            </label>
          </>
        )}
        <span />
        <div className="row">
          <button type="button" onClick={onClose}>
            Cancel
          </button>
          <button type="submit" className="primary" disabled={!!bad} data-testid="add-task-submit">
            Add task
          </button>
        </div>
      </form>
    </Modal>
  );
}

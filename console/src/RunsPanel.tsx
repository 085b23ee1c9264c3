// Runs of a pipeline and the live topology of one: task states (colour) and metrics, the crawl
// tasks' hosts (breaker, pause), the functions' queues and concurrency (the probes). Polls
// /topology every probe interval until the run ends (then probes once more and stops).
import { Background, type Node, type NodeChange, type NodeProps, Handle, MarkerType, Position, ReactFlow, ReactFlowProvider, useReactFlow } from "@xyflow/react";
import { memo, useCallback, useEffect, useMemo, useRef, useState } from "react";
import { ApiError, type Info, type Quality, type Run, type Topology, type TopoTask, api } from "./api";
import { edgeKey, edgeTypes, layout } from "./layout";
import { Modal, ago, fmt, when } from "./ui";

const SETTINGS = "stepcrawl.console.probe";
const ENDED = new Set(["succeeded", "failed", "timed_out", "aborted", "cancelled", "canceled", "stopped", "error"]);

export function runEnded(status: string | null | undefined, stopped?: string | null): boolean {
  return ENDED.has(String(status ?? "").toLowerCase()) || !!stopped;
}

export const METRIC_LABELS: Record<string, string> = {
  pages: "pages",
  pages_per_second: "pages/s",
  backlog: "backlog",
  items: "items",
  errors: "errors",
  p99_fetch_ms: "p99 ms",
  retries: "retries",
  skipped: "skipped",
};

interface ProbeSettings {
  interval_ms: number;
  include_metrics: string[];
}

function loadSettings(info: Info): ProbeSettings {
  const d = { interval_ms: info.probe?.interval_ms || 2000, include_metrics: info.probe?.include_metrics ?? [] };
  try {
    const s = JSON.parse(localStorage.getItem(SETTINGS) ?? "null") as Partial<ProbeSettings> | null;
    if (!s) return d;
    return {
      interval_ms: typeof s.interval_ms === "number" && s.interval_ms >= 250 ? s.interval_ms : d.interval_ms,
      include_metrics: Array.isArray(s.include_metrics) ? s.include_metrics.filter((m) => (info.metrics ?? []).includes(m)) : d.include_metrics,
    };
  } catch {
    return d;
  }
}

function clock(iso: string): string {
  const t = Date.parse(iso);
  return Number.isNaN(t) ? iso : new Date(t).toLocaleTimeString();
}

function statusClass(s: string | null | undefined): string {
  const v = String(s ?? "").toLowerCase();
  if (v === "succeeded") return "succeeded";
  if (v === "failed" || v === "timed_out" || v === "aborted" || v === "error") return "failed";
  if (v === "running") return "running";
  if (v === "cancelled" || v === "canceled") return "cancelled";
  return "pending";
}

/* ---------- topology graph ---------- */

const TBOX = { width: 214, height: 154 };
type TopoData = { task: TopoTask; metrics: string[] };
type TopoNodeT = Node<TopoData, "topo">;

const TopoNode = memo(function TopoNode({ data }: NodeProps<TopoNodeT>) {
  const t = data.task;
  const m = t.metrics ?? {};
  const hosts = t.hosts ?? [];
  const open = hosts.filter((h) => h.breaker !== "closed").length;
  const paused = hosts.filter((h) => h.paused).length;
  const waiting = Array.isArray(t.waiting_on) ? t.waiting_on.join(", ") : t.waiting_on;
  return (
    <div className={`topo-node s-${t.state}`} data-testid={`topo-${t.id}`} data-state={t.state}>
      <Handle type="target" position={Position.Left} isConnectable={false} className="handle-ro" />
      <div className="tp-head">
        <span className="tp-id" title={t.id}>
          {t.id}
        </span>
        <span className={`type-badge t-${t.type}`}>{t.type}</span>
      </div>
      <div className="tp-pages">
        <b data-testid={`topo-${t.id}-pages`}>{fmt(m.pages ?? null)}</b> pages
        <span className="tp-state">{t.state.replace("_", " ")}</span>
      </div>
      <dl className="tp-metrics">
        {data.metrics
          .filter((k) => k !== "pages")
          .map((k) => (
            <div key={k} data-testid={`topo-${t.id}-${k}`}>
              <dt>{METRIC_LABELS[k] ?? k}</dt>
              <dd>{fmt(m[k] ?? null, k === "pages_per_second" ? 1 : 0)}</dd>
            </div>
          ))}
      </dl>
      {hosts.length > 0 && (
        <div className={`tp-hosts${open ? " bad" : ""}`}>
          {hosts.length} host{hosts.length > 1 ? "s" : ""}
          {open ? ` · ${open} not closed` : ""}
          {paused ? ` · ${paused} paused` : ""}
        </div>
      )}
      {waiting && t.state === "waiting" && <div className="tp-wait">waiting on {waiting}</div>}
      {t.in_flight && (
        <div
          className="tp-stuck"
          data-testid={`topo-${t.id}-in-flight`}
          title={`fingerprints: ${t.in_flight.fingerprints.join(", ")}`}
        >
          {t.in_flight.urls} URLs in flight for {Math.round(t.in_flight.idle_seconds)} s, nothing
          queued
        </div>
      )}
      {t.quality && <QualityLine id={t.id} quality={t.quality} />}
      <Handle type="source" position={Position.Right} isConnectable={false} className="handle-ro" />
    </div>
  );
});
const topoTypes = { topo: TopoNode };

/** A finished crawl task's data quality: its breached checks (value, threshold, baseline). */
function QualityLine({ id, quality }: { id: string; quality: Quality }) {
  const shown = quality.breached
    .map((c) => `${c.id} ${c.value} (${c.check}${c.baseline === null ? "" : `, baseline ${c.baseline}`})`)
    .join("; ");
  const fields = quality.fields
    .map((f) => `${f.field}: fill ${f.fill === null ? "-" : `${(100 * f.fill).toFixed(1)}%`}`)
    .join("\n");
  if (!quality.breached.length) {
    return (
      <div className="tp-quality ok" data-testid={`topo-${id}-quality`} title={fields}>
        {quality.checks ? `data quality: ${quality.checks} checks ok` : `data quality: ${fmt(quality.items)} items profiled`}
      </div>
    );
  }
  return (
    <div className="tp-quality bad" data-testid={`topo-${id}-quality`} title={`${shown}\n\n${fields}`}>
      data quality: {shown}
    </div>
  );
}

function TopoGraphInner({ topo, metrics }: { topo: Topology; metrics: string[] }) {
  const rf = useReactFlow();
  const ids = topo.tasks.map((t) => t.id);
  const key = ids.join("\n");
  const { positions: pos, routes } = useMemo(() => layout(ids, topo.edges, TBOX, { nodesep: 26, ranksep: 72 }), [key, JSON.stringify(topo.edges)]); // eslint-disable-line react-hooks/exhaustive-deps
  // Keep each node's measured size across probes, so edges need no re-measuring each time.
  const measured = useRef(new Map<string, { width?: number; height?: number }>());
  const onNodesChange = useCallback((changes: NodeChange<TopoNodeT>[]) => {
    for (const c of changes) if (c.type === "dimensions" && c.dimensions) measured.current.set(c.id, c.dimensions);
  }, []);
  const nodes: TopoNodeT[] = topo.tasks.map((t) => ({
    id: t.id,
    type: "topo",
    position: pos[t.id] ?? { x: 0, y: 0 },
    width: TBOX.width,
    height: TBOX.height,
    measured: measured.current.get(t.id),
    data: { task: t, metrics },
    draggable: false,
    selectable: false,
    connectable: false,
  }));
  const edges = topo.edges.map((e) => ({
    id: `${e.source}->${e.target}`,
    type: "routed",
    source: e.source,
    target: e.target,
    data: { route: routes[edgeKey(e.source, e.target)] },
    markerEnd: { type: MarkerType.ArrowClosed, width: 18, height: 18 },
    animated: topo.tasks.find((t) => t.id === e.target)?.state === "running",
  }));
  useEffect(() => {
    requestAnimationFrame(() => rf.fitView({ padding: 0.12, maxZoom: 1 }));
  }, [key, rf]);
  return (
    <ReactFlow
      id="topology"
      nodes={nodes}
      edges={edges}
      nodeTypes={topoTypes}
      edgeTypes={edgeTypes}
      onNodesChange={onNodesChange}
      nodesDraggable={false}
      nodesConnectable={false}
      elementsSelectable={false}
      fitView
      fitViewOptions={{ padding: 0.12, maxZoom: 1 }}
      minZoom={0.2}
      proOptions={{ hideAttribution: true }}
    >
      <Background gap={18} size={1} color="#dde2e8" />
    </ReactFlow>
  );
}

/* ---------- the run view ---------- */

function RunView({ run, info, settings, onSettings, onStatus }: {
  run: string;
  info: Info;
  settings: ProbeSettings;
  onSettings(s: ProbeSettings): void;
  onStatus(run: string, status: string): void;
}) {
  const [topo, setTopo] = useState<Topology | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [polling, setPolling] = useState(true);
  const [note, setNote] = useState<string | null>(null);
  const [confirmCancel, setConfirmCancel] = useState(false);
  const [showSettings, setShowSettings] = useState(false);
  const [redriveTask, setRedriveTask] = useState("");
  const metrics = useMemo(() => Array.from(new Set(["pages", ...settings.include_metrics])), [settings.include_metrics]);
  const kick = useRef<() => void>(() => {});

  useEffect(() => {
    let stop = false;
    let timer: number | undefined;
    let endedSeen = false;
    setPolling(true);
    const probe = async () => {
      if (stop) return;
      try {
        const t = await api.topology(run, metrics);
        if (stop) return;
        setTopo(t);
        setError(null);
        onStatus(run, t.status);
        if (runEnded(t.status, t.stopped)) {
          if (endedSeen) {
            setPolling(false);
            return;
          }
          endedSeen = true;
        }
      } catch (e) {
        if (stop) return;
        setError((e as Error).message);
        if ((e as ApiError).status === 404) {
          setPolling(false);
          return;
        }
      }
      timer = window.setTimeout(probe, Math.max(250, settings.interval_ms));
    };
    kick.current = () => {
      if (timer !== undefined) window.clearTimeout(timer);
      endedSeen = false;
      setPolling(true);
      void probe();
    };
    void probe();
    return () => {
      stop = true;
      if (timer !== undefined) window.clearTimeout(timer);
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [run, settings.interval_ms, metrics.join(",")]);

  const ended = topo ? runEnded(topo.status, topo.stopped) : false;
  const crawlTasks = (topo?.tasks ?? []).filter((t) => (t.hosts ?? []).length > 0 || t.type === "crawl");

  const cancel = async () => {
    setConfirmCancel(false);
    try {
      const r = await api.cancel(run);
      setNote(`cancel sent (was ${r.before})`);
      kick.current();
    } catch (e) {
      setError((e as Error).message);
    }
  };
  const redrive = async () => {
    try {
      const r = await api.redrive(run, redriveTask ? { task: redriveTask } : {});
      setNote(`re-drove ${r.moved} of ${r.found} failed URL${r.found === 1 ? "" : "s"}`);
      kick.current();
    } catch (e) {
      setError((e as Error).message);
    }
  };

  return (
    <div className="run-view">
      <div className="toolbar">
        <span className="run-id" title={run}>
          {run}
        </span>
        <span className={`status-badge st-${statusClass(topo?.status)}`} data-testid="run-status">
          {topo?.status ?? "…"}
        </span>
        <span className="muted small">
          {topo?.started && <>started {ago(topo.started)}</>}
          {topo?.stopped && <> · stopped {ago(topo.stopped)}</>}
          {topo?.probed_at && <> · probed {clock(topo.probed_at)}</>}
          {polling ? <> · every {settings.interval_ms} ms</> : <> · not polling</>}
        </span>
        <span className="spacer" />
        <button type="button" className="small" onClick={() => setShowSettings((s) => !s)} aria-expanded={showSettings} data-testid="probe-settings">
          Settings
        </button>
        {!polling && (
          <button type="button" className="small" onClick={() => kick.current()}>
            Probe now
          </button>
        )}
        <label className="inline small">
          <span className="sr-only">Re-drive scope</span>
          <select value={redriveTask} onChange={(e) => setRedriveTask(e.target.value)} aria-label="Re-drive scope">
            <option value="">all tasks</option>
            {crawlTasks.map((t) => (
              <option key={t.id} value={t.id}>
                {t.id}
              </option>
            ))}
          </select>
        </label>
        <button type="button" className="small" onClick={redrive} data-testid="redrive">
          Re-drive failed URLs
        </button>
        <button type="button" className="small danger" disabled={ended} onClick={() => setConfirmCancel(true)} data-testid="cancel-run">
          Cancel run
        </button>
      </div>
      {showSettings && (
        <fieldset className="probe-settings" aria-label="Probe settings">
          <label>
            interval (ms){" "}
            <input
              type="number"
              min={250}
              step={250}
              value={settings.interval_ms}
              onChange={(e) => {
                const v = Number(e.target.value);
                if (Number.isFinite(v) && v >= 250) onSettings({ ...settings, interval_ms: v });
              }}
              data-testid="probe-interval"
            />
          </label>
          <span className="muted">metrics:</span>
          {(info.metrics ?? []).map((m) => (
            <label key={m} className="check">
              <input
                type="checkbox"
                checked={settings.include_metrics.includes(m)}
                onChange={(e) =>
                  onSettings({
                    ...settings,
                    include_metrics: e.target.checked
                      ? (info.metrics ?? []).filter((x) => x === m || settings.include_metrics.includes(x))
                      : settings.include_metrics.filter((x) => x !== m),
                  })
                }
              />{" "}
              {METRIC_LABELS[m] ?? m}
            </label>
          ))}
          <button
            type="button"
            className="link small"
            onClick={() => onSettings({ interval_ms: info.probe?.interval_ms || 2000, include_metrics: info.probe?.include_metrics ?? [] })}
          >
            defaults
          </button>
        </fieldset>
      )}
      {note && (
        <div className="alert info" role="status">
          {note}{" "}
          <button type="button" className="link small" onClick={() => setNote(null)}>
            dismiss
          </button>
        </div>
      )}
      {error && <div className="alert error">{error}</div>}
      {topo?.error && (
        <div className="alert error">
          <b>{topo.error}</b> {topo.cause}
        </div>
      )}
      <div className="topo-graph" aria-label="Run topology">
        {topo ? (
          <ReactFlowProvider>
            <TopoGraphInner topo={topo} metrics={metrics} />
          </ReactFlowProvider>
        ) : (
          <p className="muted pad">Probing…</p>
        )}
      </div>
      {topo && (
        <div className="probes">
          <section aria-label="Functions" className="functions" data-testid="functions">
            <h3>Functions</h3>
            <div className="fn-strip">
              {(topo.functions ?? []).map((f) => (
                <div className="fn" key={f.name} data-testid={`fn-${f.name}`}>
                  <div className="fn-name">{f.name}</div>
                  <dl>
                    <div>
                      <dt>queued</dt>
                      <dd>{fmt(f.queue_visible)}</dd>
                    </div>
                    <div>
                      <dt>in flight</dt>
                      <dd>{fmt(f.queue_in_flight)}</dd>
                    </div>
                    <div className={f.dead_letters ? "bad" : ""}>
                      <dt>dead letters</dt>
                      <dd>{fmt(f.dead_letters)}</dd>
                    </div>
                    <div>
                      <dt>concurrency</dt>
                      <dd>{fmt(f.concurrency)}</dd>
                    </div>
                  </dl>
                </div>
              ))}
              {!topo.functions?.length && <p className="muted">no probes</p>}
            </div>
          </section>
          <section aria-label="Hosts" className="hosts" data-testid="hosts">
            <h3>Hosts</h3>
            {crawlTasks.some((t) => (t.hosts ?? []).length) ? (
              <table className="table compact">
                <thead>
                  <tr>
                    <th>task</th>
                    <th>host</th>
                    <th>breaker</th>
                    <th>paused</th>
                    <th className="num">pages</th>
                    <th className="num">errors</th>
                  </tr>
                </thead>
                <tbody>
                  {crawlTasks.flatMap((t) =>
                    (t.hosts ?? []).map((h) => (
                      <tr key={`${t.id}/${h.host}`} data-testid={`host-${t.id}-${h.host}`}>
                        <td>{t.id}</td>
                        <td className="mono">{h.host}</td>
                        <td>
                          <span className={`breaker b-${h.breaker}`} title={h.open_until ? `open until ${when(h.open_until)}` : undefined}>
                            {h.breaker.replace("_", "-")}
                          </span>
                        </td>
                        <td>{h.paused ? <span className="badge warn">paused</span> : "no"}</td>
                        <td className="num">{fmt(h.pages)}</td>
                        <td className="num">{fmt(h.errors)}</td>
                      </tr>
                    )),
                  )}
                </tbody>
              </table>
            ) : (
              <p className="muted">no hosts yet</p>
            )}
          </section>
        </div>
      )}
      {confirmCancel && (
        <Modal
          title="Cancel this run?"
          onClose={() => setConfirmCancel(false)}
          testid="confirm-cancel"
          footer={
            <>
              <button type="button" onClick={() => setConfirmCancel(false)}>
                Keep running
              </button>
              <button type="button" className="danger primary" onClick={cancel} data-testid="confirm-cancel-run">
                Cancel run
              </button>
            </>
          }
        >
          <p>
            Run <code>{run}</code> stops; tasks still running are cancelled.
          </p>
        </Modal>
      )}
    </div>
  );
}

/* ---------- runs list ---------- */

export function RunsPanel({ name, info, run, onRun }: { name: string; info: Info; run: string | null; onRun(run: string | null): void }) {
  const [runs, setRuns] = useState<Run[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [starting, setStarting] = useState(false);
  const [settings, setSettingsState] = useState<ProbeSettings>(() => loadSettings(info));
  const setSettings = (s: ProbeSettings) => {
    setSettingsState(s);
    localStorage.setItem(SETTINGS, JSON.stringify(s));
  };

  const refresh = useCallback(async () => {
    try {
      setRuns(await api.runs(name, 25));
      setError(null);
    } catch (e) {
      setError((e as Error).message);
    }
  }, [name]);

  useEffect(() => {
    setRuns(null);
    void refresh();
  }, [refresh]);

  // While a listed run is live, refresh the list now and then.
  const live = (runs ?? []).some((r) => !runEnded(r.status, r.stopped));
  useEffect(() => {
    if (!live) return;
    const t = window.setInterval(refresh, Math.max(3000, settings.interval_ms));
    return () => window.clearInterval(t);
  }, [live, refresh, settings.interval_ms]);

  const start = async () => {
    setStarting(true);
    try {
      const r = await api.startRun(name);
      onRun(r.run);
      await refresh();
    } catch (e) {
      setError((e as Error).message);
    } finally {
      setStarting(false);
    }
  };

  const onStatus = useCallback(
    (id: string, status: string) =>
      setRuns((rs) => (rs && rs.some((r) => r.run === id && r.status !== status) ? rs.map((r) => (r.run === id ? { ...r, status } : r)) : rs)),
    [],
  );

  return (
    <div className="runs">
      <aside className="run-list" aria-label="Runs">
        <div className="run-list-head">
          <button type="button" className="primary" onClick={start} disabled={starting} data-testid="start-run">
            {starting ? "Starting…" : "Start run"}
          </button>
          <button type="button" className="small" onClick={refresh} aria-label="Refresh runs">
            ↻
          </button>
        </div>
        {error && <div className="alert error">{error}</div>}
        {runs === null ? (
          <p className="muted pad">Loading…</p>
        ) : runs.length === 0 ? (
          <p className="muted pad">No runs yet.</p>
        ) : (
          <ul>
            {runs.map((r) => (
              <li key={r.run}>
                <button
                  type="button"
                  className={`run-item${r.run === run ? " active" : ""}`}
                  onClick={() => onRun(r.run)}
                  aria-current={r.run === run ? "true" : undefined}
                  data-testid={`run-${r.run}`}
                >
                  <span className={`dot st-${statusClass(r.status)}`} aria-hidden="true" />
                  <span className="run-name">{r.run}</span>
                  <span className="run-meta">
                    {r.status.toLowerCase()} · {ago(r.started)}
                  </span>
                </button>
              </li>
            ))}
          </ul>
        )}
      </aside>
      <div className="run-main">
        {run ? (
          <RunView key={run} run={run} info={info} settings={settings} onSettings={setSettings} onStatus={onStatus} />
        ) : (
          <div className="empty">
            <p>Start a run, or pick one on the left to watch its topology.</p>
          </div>
        )}
      </div>
    </div>
  );
}

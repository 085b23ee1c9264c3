// The editor's graph: tasks as nodes (id, type, priority), dependencies as edges, dagre layout.
// Drag from a task's right handle (downstream) to another task's left handle to add a
// dependency; select a task or an edge and press Delete/Backspace to remove it. Nothing changes
// here directly: every gesture becomes an op for /preview, and the answer's graph comes back.
import {
  Background,
  type Connection,
  Controls,
  type Edge,
  Handle,
  MarkerType,
  type Node,
  type NodeChange,
  type NodeProps,
  type EdgeChange,
  Panel,
  Position,
  ReactFlow,
  ReactFlowProvider,
  applyEdgeChanges,
  applyNodeChanges,
  useReactFlow,
} from "@xyflow/react";
import { memo, useCallback, useEffect, useMemo, useRef, useState } from "react";
import type { Graph } from "./api";
import { edgeKey, edgeTypes, layout } from "./layout";

const BOX = { width: 150, height: 56 };

type TaskData = { id: string; type: string; priority: number; description: string | null; issues: number };
type TaskNodeT = Node<TaskData, "task">;

const TaskNode = memo(function TaskNode({ data, selected }: NodeProps<TaskNodeT>) {
  return (
    <div
      className={`task-node t-${data.type}${selected ? " selected" : ""}${data.issues ? " has-issues" : ""}`}
      data-testid={`node-${data.id}`}
      title={data.description || undefined}
    >
      <Handle
        type="target"
        position={Position.Left}
        className="handle handle-in"
        data-testid={`handle-in-${data.id}`}
        aria-label={`${data.id}: drop here to depend on another task`}
      />
      <div className="tn-id">{data.id}</div>
      <div className="tn-meta">
        <span className={`type-badge t-${data.type}`}>{data.type || "?"}</span>
        {typeof data.priority === "number" && (
          <span className="tn-prio" title="priority: lower runs first among tasks ready together">
            prio {data.priority}
          </span>
        )}
        {data.issues > 0 && (
          <span className="tn-issues" title={`${data.issues} issue${data.issues > 1 ? "s" : ""}`} aria-label={`${data.issues} issue${data.issues > 1 ? "s" : ""}`}>
            {data.issues}
          </span>
        )}
      </div>
      <Handle
        type="source"
        position={Position.Right}
        className="handle handle-out"
        data-testid={`handle-out-${data.id}`}
        aria-label={`${data.id}: drag to a task that should wait for this one`}
      />
    </div>
  );
});

const nodeTypes = { task: TaskNode };

interface Props {
  graph: Graph;
  issuesByTask: Record<string, number>;
  selectedTask: string | null;
  onSelect(sel: { task: string | null; edge: { source: string; target: string } | null }): void;
  onConnect(source: string, target: string): void;
  onDelete(tasks: string[], edges: { source: string; target: string }[]): void;
}

function edgeId(s: string, t: string) {
  return `${s}->${t}`;
}

function Inner({ graph, issuesByTask, selectedTask, onSelect, onConnect, onDelete }: Props) {
  const rf = useReactFlow();
  const [nodes, setNodes] = useState<TaskNodeT[]>([]);
  const [edges, setEdges] = useState<Edge[]>([]);
  const idsKey = useMemo(() => graph.nodes.map((n) => n.id).join("\n") + "|" + graph.edges.map((e) => edgeId(e.source, e.target)).join("\n"), [graph]);
  const lastIds = useRef("");

  useEffect(() => {
    const ids = graph.nodes.map((n) => n.id);
    const { positions: pos, routes } = layout(ids, graph.edges, BOX);
    setNodes(
      graph.nodes.map((n) => ({
        id: n.id,
        type: "task" as const,
        position: pos[n.id],
        width: BOX.width,
        height: BOX.height,
        selected: n.id === selectedTask,
        data: {
          id: n.id,
          type: n.type,
          priority: n.priority,
          description: n.description,
          issues: issuesByTask[n.id] ?? 0,
        },
      })),
    );
    setEdges((prev) => {
      const sel = new Set(prev.filter((e) => e.selected).map((e) => e.id));
      return graph.edges.map((e) => ({
        id: edgeId(e.source, e.target),
        type: "routed",
        source: e.source,
        target: e.target,
        data: { route: routes[edgeKey(e.source, e.target)] },
        selected: sel.has(edgeId(e.source, e.target)),
        markerEnd: { type: MarkerType.ArrowClosed, width: 18, height: 18 },
        ariaLabel: `${e.target} depends on ${e.source}`,
      }));
    });
    const key = ids.join("\n");
    if (key !== lastIds.current) {
      lastIds.current = key;
      requestAnimationFrame(() => rf.fitView({ padding: 0.15, maxZoom: 1.1, duration: 0 }));
    }
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [idsKey, graph, issuesByTask]);

  useEffect(() => {
    setNodes((prev) => prev.map((n) => (n.selected === (n.id === selectedTask) ? n : { ...n, selected: n.id === selectedTask })));
  }, [selectedTask]);

  const onNodesChange = useCallback(
    (changes: NodeChange<TaskNodeT>[]) =>
      setNodes((ns) => applyNodeChanges(changes.filter((c) => c.type === "select" || c.type === "dimensions"), ns)),
    [],
  );
  const onEdgesChange = useCallback(
    (changes: EdgeChange[]) => setEdges((es) => applyEdgeChanges(changes.filter((c) => c.type === "select"), es)),
    [],
  );

  const existing = useMemo(() => new Set(graph.edges.map((e) => edgeId(e.source, e.target))), [graph]);
  const isValidConnection = useCallback(
    (c: Connection | Edge) => !!c.source && !!c.target && c.source !== c.target && !existing.has(edgeId(c.source, c.target)),
    [existing],
  );

  return (
    <ReactFlow<TaskNodeT, Edge>
      id="pipeline-graph"
      nodes={nodes}
      edges={edges}
      nodeTypes={nodeTypes}
      edgeTypes={edgeTypes}
      onNodesChange={onNodesChange}
      onEdgesChange={onEdgesChange}
      nodesDraggable={false}
      nodesConnectable
      elementsSelectable
      connectionRadius={30}
      isValidConnection={isValidConnection}
      onConnect={(c) => c.source && c.target && c.source !== c.target && onConnect(c.source, c.target)}
      onSelectionChange={({ nodes: ns, edges: es }) => {
        const e = es[0];
        onSelect({
          task: ns[0]?.id ?? null,
          edge: !ns.length && e ? { source: e.source, target: e.target } : null,
        });
      }}
      onPaneClick={() => onSelect({ task: null, edge: null })}
      deleteKeyCode={["Delete", "Backspace"]}
      onBeforeDelete={async ({ nodes: ns, edges: es }) => {
        const gone = new Set(ns.map((n) => n.id));
        onDelete(
          ns.map((n) => n.id),
          es.filter((e) => !gone.has(e.source) && !gone.has(e.target)).map((e) => ({ source: e.source, target: e.target })),
        );
        return false;
      }}
      fitView
      fitViewOptions={{ padding: 0.15, maxZoom: 1.1 }}
      minZoom={0.2}
      maxZoom={2}
      proOptions={{ hideAttribution: true }}
      defaultEdgeOptions={{ interactionWidth: 24 }}
    >
      <Background gap={18} size={1} color="#dde2e8" />
      <Controls showInteractive={false} position="bottom-left" />
      <Panel position="bottom-right" className="graph-hint">
        drag a right dot onto a left dot: add a dependency · Delete: remove the selection
      </Panel>
    </ReactFlow>
  );
}

export function GraphView(props: Props) {
  return (
    <div className="graph" aria-label="Pipeline graph">
      <ReactFlowProvider>
        <Inner {...props} />
      </ReactFlowProvider>
    </div>
  );
}

// Layered layout, left to right (dagre), for the editor's graph and the run topology, and an
// edge that follows dagre's route (so an edge skipping a rank bends around the tasks between
// instead of running under them).
import dagre from "@dagrejs/dagre";
import { BaseEdge, type Edge, type EdgeProps } from "@xyflow/react";

export interface Box {
  width: number;
  height: number;
}

export interface Point {
  x: number;
  y: number;
}

export interface Layout {
  positions: Record<string, Point>; // top-left corners
  routes: Record<string, Point[]>; // "source->target": dagre's bend points between the two tasks
}

export const edgeKey = (s: string, t: string) => `${s}->${t}`;

/** Positions of the nodes (upstream on the left) and routes of the edges among them. */
export function layout(
  ids: string[],
  edges: { source: string; target: string }[],
  box: Box,
  gaps: { nodesep: number; ranksep: number } = { nodesep: 22, ranksep: 46 },
): Layout {
  const g = new dagre.graphlib.Graph();
  g.setGraph({ rankdir: "LR", ...gaps, marginx: 16, marginy: 16 });
  g.setDefaultEdgeLabel(() => ({}));
  const known = new Set(ids);
  for (const id of ids) g.setNode(id, { width: box.width, height: box.height });
  for (const e of edges) if (known.has(e.source) && known.has(e.target) && e.source !== e.target) g.setEdge(e.source, e.target);
  dagre.layout(g);
  const positions: Record<string, Point> = {};
  for (const id of ids) {
    const n = g.node(id);
    positions[id] = { x: Math.round(n.x - box.width / 2), y: Math.round(n.y - box.height / 2) };
  }
  const routes: Record<string, Point[]> = {};
  for (const e of g.edges()) {
    const pts = (g.edge(e)?.points ?? []) as Point[];
    // The first and last points sit on the node borders; the handles replace them.
    routes[edgeKey(e.v, e.w)] = pts.slice(1, -1).map((p) => ({ x: Math.round(p.x), y: Math.round(p.y) }));
  }
  return { positions, routes };
}

/** A smooth path through the points, horizontal at each (suits a left-to-right layout). */
export function routePath(points: Point[]): string {
  let d = `M ${points[0].x},${points[0].y}`;
  for (let i = 1; i < points.length; i++) {
    const a = points[i - 1];
    const b = points[i];
    const mx = a.x + (b.x - a.x) / 2;
    d += ` C ${mx},${a.y} ${mx},${b.y} ${b.x},${b.y}`;
  }
  return d;
}

export type RoutedEdgeT = Edge<{ route?: Point[] }, "routed">;

export function RoutedEdge({ sourceX, sourceY, targetX, targetY, data, markerEnd, style, interactionWidth }: EdgeProps<RoutedEdgeT>) {
  // dagre gives an edge between neighbouring ranks one bend point, a longer one several: only
  // those need following (nothing stands between neighbours). Points outside the two ends
  // (a layout older than the nodes) are dropped.
  const route = data?.route ?? [];
  const mid = route.length > 1 ? route.filter((p) => p.x > sourceX + 4 && p.x < targetX - 4) : [];
  const path = routePath([{ x: sourceX, y: sourceY }, ...mid, { x: targetX, y: targetY }]);
  return <BaseEdge path={path} markerEnd={markerEnd} style={style} interactionWidth={interactionWidth} />;
}

export const edgeTypes = { routed: RoutedEdge };

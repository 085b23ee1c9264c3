// The console's HTTP API client (docs/console-api.md). Local mode: same origin, the cookie, and
// the header X-Stepcrawl-Token from <meta name="stepcrawl-token"> (the server fills it in).
// AWS mode: Authorization: Bearer <Cognito id token> (auth.ts).
import * as auth from "./auth";

export type Version = string;

export interface Config {
  mode: "local" | "aws";
  api: string;
  auth?: auth.AuthConfig;
}

export interface Info {
  mode: "local" | "aws";
  read_only: boolean;
  stage: string;
  version: string;
  probe: { interval_ms: number; include_metrics: string[] };
  metrics: string[];
}

export interface Issue {
  path: (string | number)[];
  field: string;
  message: string;
  hint: string | null;
  line: number | null;
  column: number | null;
}

export interface GraphNode {
  id: string;
  type: string;
  priority: number;
  depends_on: string[];
  description: string | null;
}

export interface Edge {
  source: string;
  target: string;
}

export interface Graph {
  nodes: GraphNode[];
  edges: Edge[];
  schedule: string | null;
}

export interface PipelineSummary {
  name: string;
  file: string;
  version: Version;
  valid: boolean;
  issues: number;
  description: string;
  schedule: string | null;
  tasks: number;
  deployed: boolean;
  /** The version of the file the stack was deployed from (null: not deployed). */
  deployed_version: Version | null;
}

export interface Pipeline {
  name: string;
  file: string;
  version: Version;
  yaml: string;
  valid: boolean;
  issues: Issue[];
  graph: Graph;
  read_only: boolean;
}

export interface Preview {
  yaml: string;
  valid: boolean;
  issues: Issue[];
  graph: Graph;
}

export type Op =
  | { op: "add_task"; task: Record<string, unknown> & { id: string; type: string } }
  | { op: "remove_task"; id: string }
  | { op: "connect"; source: string; target: string }
  | { op: "disconnect"; source: string; target: string }
  | { op: "set"; path: (string | number)[]; value: unknown };

export interface Conflict {
  error: string;
  current_version: Version;
  current_yaml: string;
  base_version: Version;
  diff: string;
  merged: string | null;
  merge_conflicts: boolean;
}

export interface HistoryEntry {
  version: Version;
  saved_at: string;
  bytes: number;
  source: "file" | "console" | "restore" | string;
}

export interface Run {
  run: string;
  pipeline: string;
  status: string;
  started: string | null;
  stopped: string | null;
}

export interface Host {
  host: string;
  breaker: "closed" | "open" | "half_open" | string;
  open_until: string | null;
  paused: boolean;
  pages: number;
  errors: number;
}

export interface TopoTask {
  id: string;
  type: string;
  state: string;
  waiting_on: string[] | string | null;
  depends_on: string[];
  /** URLs claimed but neither in the backlog, nor queued, nor recorded, while nothing moves. */
  in_flight?: { urls: number; idle_seconds: number; fingerprints: string[] } | null;
  metrics: Record<string, number | null>;
  hosts?: Host[];
  /** A finished crawl task's data-quality checks (docs/pipelines.md, "Data quality"). */
  quality?: Quality | null;
}

export interface QualityCheck {
  id: string;
  severity: "warn" | "fail" | string;
  value: number;
  check: string;
  baseline: number | null;
  breached: boolean;
}

export interface Quality {
  items: number;
  checks: number;
  breached: QualityCheck[];
  fields: { field: string; fill: number | null; matched: number | null }[];
}

export interface FunctionProbe {
  name: string;
  queue_visible: number | null;
  queue_in_flight: number | null;
  dead_letters: number | null;
  concurrency: number | null;
}

export interface Topology {
  run: string;
  pipeline: string;
  status: string;
  started: string | null;
  stopped: string | null;
  error: string | null;
  cause: string | null;
  probed_at: string | null;
  tasks: TopoTask[];
  edges: Edge[];
  functions: FunctionProbe[];
}

/** An answer other than 2xx: `status`, and the JSON body (`error`, `issues`, a 409's fields). */
export class ApiError extends Error {
  constructor(
    public status: number,
    public body: Record<string, unknown>,
  ) {
    super(typeof body.error === "string" ? body.error : `HTTP ${status}`);
  }
  get issues(): Issue[] {
    return Array.isArray(this.body.issues) ? (this.body.issues as Issue[]) : [];
  }
}

let config: Config = { mode: "local", api: "api" };
let apiBase = "";

/** The local server's token: the <meta> it fills in, else ?token= in the page's URL. */
export function localToken(): string | null {
  const meta = document.querySelector<HTMLMetaElement>('meta[name="stepcrawl-token"]')?.content ?? "";
  if (meta && !meta.includes("%STEPCRAWL_TOKEN%")) return meta;
  return new URLSearchParams(location.search).get("token");
}

export async function loadConfig(): Promise<Config> {
  try {
    const r = await fetch("./config.json", { credentials: "same-origin", cache: "no-store" });
    if (r.ok) config = { ...config, ...((await r.json()) as Partial<Config>) };
  } catch {
    /* no config.json: local defaults */
  }
  apiBase = new URL(config.api || "api", location.href).href.replace(/\/+$/, "");
  if (config.mode === "aws" && config.auth) await auth.idToken(config.auth);
  return config;
}

export function getConfig(): Config {
  return config;
}

export function quoteVersion(v: Version): string {
  return `"${String(v)}"`;
}

function url(path: string, query?: Record<string, string | number | undefined>): string {
  const u = new URL(apiBase + path);
  for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined && v !== "") u.searchParams.set(k, String(v));
  return u.href;
}

async function request<T>(
  method: string,
  path: string,
  opts: { body?: unknown; query?: Record<string, string | number | undefined>; headers?: Record<string, string> } = {},
  retried = false,
): Promise<T> {
  const headers: Record<string, string> = { Accept: "application/json", ...(opts.headers ?? {}) };
  if (opts.body !== undefined) headers["Content-Type"] = "application/json";
  if (config.mode === "aws" && config.auth) {
    headers.Authorization = `Bearer ${await auth.idToken(config.auth)}`;
  } else {
    const token = localToken();
    if (token) headers["X-Stepcrawl-Token"] = token;
  }
  let r: Response;
  try {
    r = await fetch(url(path, opts.query), {
      method,
      headers,
      credentials: "same-origin",
      cache: "no-store",
      body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
    });
  } catch (e) {
    throw new ApiError(0, { error: `cannot reach the console API (${(e as Error).message})` });
  }
  if (r.status === 401 && config.mode === "aws" && config.auth && !retried) {
    auth.forget();
    return request<T>(method, path, opts, true);
  }
  const text = await r.text();
  let body: unknown = {};
  if (text) {
    try {
      body = JSON.parse(text);
    } catch {
      const plain = text.replace(/<[^>]*>/g, " ").replace(/\s+/g, " ").trim();
      body = { error: `HTTP ${r.status}${plain ? `: ${plain.slice(0, 160)}` : ""}` };
    }
  }
  if (!r.ok) throw new ApiError(r.status, (body ?? {}) as Record<string, unknown>);
  return body as T;
}

const enc = encodeURIComponent;

export const api = {
  info: () => request<Info>("GET", "/info"),
  schema: () => request<Record<string, unknown>>("GET", "/schema"),
  pipelines: () => request<{ pipelines: PipelineSummary[] }>("GET", "/pipelines").then((r) => r.pipelines),
  pipeline: (name: string) => request<Pipeline>("GET", `/pipelines/${enc(name)}`),
  preview: (name: string, yaml: string, ops?: Op[]) =>
    request<Preview>("POST", `/pipelines/${enc(name)}/preview`, { body: ops?.length ? { yaml, ops } : { yaml } }),
  save: (name: string, yaml: string, base: Version) =>
    request<{ version: Version; saved_at: string }>("PUT", `/pipelines/${enc(name)}`, {
      body: { yaml },
      headers: { "If-Match": quoteVersion(base) },
    }),
  history: (name: string) =>
    request<{ versions: HistoryEntry[] }>("GET", `/pipelines/${enc(name)}/history`).then((r) => r.versions),
  version: (name: string, version: Version) =>
    request<{ version: Version; yaml: string }>("GET", `/pipelines/${enc(name)}/versions/${enc(String(version))}`),
  diff: (name: string, from: Version, to?: Version) =>
    request<{ diff: string }>("GET", `/pipelines/${enc(name)}/diff`, { query: { from, to } }).then((r) => r.diff),
  restore: (name: string, version: Version, base: Version) =>
    request<{ version?: Version; saved_at?: string }>("POST", `/pipelines/${enc(name)}/restore`, {
      body: { version },
      headers: { "If-Match": quoteVersion(base) },
    }),
  runs: (pipeline: string, limit = 20) =>
    request<{ runs: Run[] }>("GET", "/runs", { query: { pipeline, limit } }).then((r) => r.runs),
  startRun: (name: string) => request<{ run: string; execution_arn?: string }>("POST", `/pipelines/${enc(name)}/runs`, { body: {} }),
  cancel: (run: string) => request<{ run: string; before: string }>("POST", `/runs/${enc(run)}/cancel`, { body: {} }),
  redrive: (run: string, body: { task?: string; class?: string; host?: string } = {}) =>
    request<{ moved: number; found: number }>("POST", `/runs/${enc(run)}/redrive`, { body }),
  topology: (run: string, metrics: string[]) =>
    request<Topology>("GET", `/runs/${enc(run)}/topology`, { query: { metrics: metrics.join(",") } }),
};

/**
 * Server-Sent Events from /api/events (local only). Same origin, so the cookie goes along; the
 * token rides in ?token= too in case the cookie is missing. Returns a function that closes it.
 */
export function subscribeEvents(onPipeline: (e: { name: string; version: Version; source?: string }) => void): () => void {
  if (typeof EventSource === "undefined") return () => {};
  const token = localToken();
  const es = new EventSource(url("/events", { token: token ?? undefined }), { withCredentials: true });
  es.addEventListener("pipeline", (ev) => {
    try {
      onPipeline(JSON.parse((ev as MessageEvent<string>).data));
    } catch {
      /* ignore a malformed event */
    }
  });
  return () => es.close();
}

/** "v12" for a number-like version, the version itself otherwise. */
export function vlabel(v: Version | null | undefined): string {
  if (v === null || v === undefined || v === "") return "—";
  const s = String(v);
  return /^\d+$/.test(s) ? `v${s}` : s;
}

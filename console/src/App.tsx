// The console's shell: header, the pipelines sidebar, the open pipeline; routes in the URL hash
// (#/p/<name>[/editor|/history|/runs[/<run>]]) so a view can be linked and reloaded.
import { useCallback, useEffect, useRef, useState } from "react";
import { type Config, type Info, type PipelineSummary, api, getConfig, subscribeEvents } from "./api";
import * as auth from "./auth";
import { type PipelineEvent, PipelineView, type Tab } from "./PipelineView";
import type { JsonSchema } from "./schema";

interface Route {
  name: string | null;
  tab: Tab;
  run: string | null;
}

function parseHash(): Route {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  if (parts[0] !== "p" || !parts[1]) return { name: null, tab: "editor", run: null };
  const tab = (["editor", "history", "runs"] as Tab[]).includes(parts[2] as Tab) ? (parts[2] as Tab) : "editor";
  return { name: parts[1], tab, run: tab === "runs" && parts[3] ? parts[3] : null };
}

function hashOf(r: Route): string {
  if (!r.name) return "#/";
  let h = `#/p/${encodeURIComponent(r.name)}`;
  if (r.tab !== "editor") h += `/${r.tab}`;
  if (r.tab === "runs" && r.run) h += `/${encodeURIComponent(r.run)}`;
  return h;
}

export function App() {
  const [config] = useState<Config>(getConfig());
  const [info, setInfo] = useState<Info | null>(null);
  const [schema, setSchema] = useState<JsonSchema | null>(null);
  const [pipelines, setPipelines] = useState<PipelineSummary[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [route, setRoute] = useState<Route>(parseHash());
  const [dirty, setDirty] = useState<Record<string, boolean>>({});
  const [event, setEvent] = useState<PipelineEvent | null>(null);
  const [live, setLive] = useState(false);
  const eventSeq = useRef(0);

  const go = useCallback((r: Route, replace = false) => {
    const h = hashOf(r);
    if (location.hash !== h) {
      if (replace) history.replaceState(null, "", h);
      else history.pushState(null, "", h);
    }
    setRoute(r);
  }, []);

  useEffect(() => {
    const on = () => setRoute(parseHash());
    window.addEventListener("hashchange", on);
    window.addEventListener("popstate", on);
    return () => {
      window.removeEventListener("hashchange", on);
      window.removeEventListener("popstate", on);
    };
  }, []);

  const refreshList = useCallback(async () => {
    try {
      setPipelines(await api.pipelines());
      setError(null);
    } catch (e) {
      setError((e as Error).message);
    }
  }, []);

  useEffect(() => {
    api
      .info()
      .then(setInfo)
      .catch((e: Error) => setError(e.message));
    api
      .schema()
      .then((s) => setSchema(s as JsonSchema))
      .catch(() => setSchema({}));
    void refreshList();
  }, [refreshList]);

  // Open a pipeline when none is: the demo if there is one, else the first.
  useEffect(() => {
    if (route.name || !pipelines?.length) return;
    const first = pipelines.find((p) => p.name === "demo-shop") ?? pipelines[0];
    go({ name: first.name, tab: "editor", run: null }, true);
  }, [pipelines, route.name, go]);

  // New versions as they land (local only: on AWS the files never change).
  useEffect(() => {
    if (!info || info.read_only || info.mode !== "local" || config.mode === "aws") return;
    let timer: number | undefined;
    const close = subscribeEvents((e) => {
      setEvent({ ...e, seq: ++eventSeq.current });
      window.clearTimeout(timer);
      timer = window.setTimeout(refreshList, 250);
    });
    setLive(true);
    return () => {
      close();
      window.clearTimeout(timer);
      setLive(false);
    };
  }, [info, config.mode, refreshList]);

  const onDirty = useCallback((name: string, d: boolean) => setDirty((m) => (!!m[name] === d ? m : { ...m, [name]: d })), []);

  const user = config.mode === "aws" ? auth.userName() : null;

  return (
    <div className="app">
      <header className="topbar">
        <div className="brand">
          <span className="logo" aria-hidden="true">
            ◆
          </span>{" "}
          stepcrawl <span className="muted">console</span>
        </div>
        {info && (
          <div className="env">
            <span className="badge plain">stage {info.stage}</span>
            <span className="badge plain">{info.mode}</span>
            {info.read_only && <span className="badge warn">read-only</span>}
            {live && (
              <span className="badge ok" title="new versions show up as they are saved">
                live
              </span>
            )}
            <span className="muted small">v{info.version}</span>
          </div>
        )}
        <span className="spacer" />
        {config.mode === "aws" && config.auth && (
          <div className="user">
            {user && <span className="muted small">{user}</span>}
            <button type="button" className="small" onClick={() => auth.signOut(config.auth!)}>
              Sign out
            </button>
          </div>
        )}
      </header>
      {error && (
        <div className="alert error top">
          {error}{" "}
          <button type="button" className="link small" onClick={() => setError(null)}>
            dismiss
          </button>
        </div>
      )}
      <div className="body">
        <nav className="sidebar" aria-label="Pipelines">
          <h2>
            Pipelines <span className="muted small">{pipelines?.length ?? ""}</span>
          </h2>
          {pipelines === null ? (
            <p className="muted pad">Loading…</p>
          ) : pipelines.length === 0 ? (
            <p className="muted pad">No pipelines found.</p>
          ) : (
            <ul>
              {pipelines.map((p) => (
                <li key={p.name}>
                  <button
                    type="button"
                    className={`pipe-item${route.name === p.name ? " active" : ""}`}
                    aria-current={route.name === p.name ? "page" : undefined}
                    onClick={() => go({ name: p.name, tab: route.name === p.name ? route.tab : "editor", run: null })}
                    data-testid={`pipeline-${p.name}`}
                    title={p.description || p.file}
                  >
                    <span className="pi-row">
                      <span className="pi-name">{p.name}</span>
                      {dirty[p.name] && (
                        <span className="unsaved" title="unsaved edits" aria-label="unsaved edits">
                          ●
                        </span>
                      )}
                      <span className={`badge ${p.valid ? "ok" : "bad"}`} data-testid={`pipeline-${p.name}-validity`}>
                        {p.valid ? "valid" : `${p.issues} issue${p.issues === 1 ? "" : "s"}`}
                      </span>
                    </span>
                    <span className="pi-meta">
                      {p.tasks} task{p.tasks === 1 ? "" : "s"}
                      {p.schedule ? ` · ${p.schedule}` : " · no schedule"}
                      {p.deployed && p.deployed_version !== null && p.deployed_version !== p.version ? (
                        <span
                          className="badge warn tiny"
                          title="The file changed since the stack was deployed: runs use the deployed version (restart stepcrawl serve, or cdk deploy)"
                          data-testid={`pipeline-${p.name}-undeployed`}
                        >
                          changed since deploy
                        </span>
                      ) : (
                        p.deployed && <span className="badge plain tiny">deployed</span>
                      )}
                    </span>
                  </button>
                </li>
              ))}
            </ul>
          )}
        </nav>
        <main className="main">
          {route.name && info ? (
            <PipelineView
              key={route.name}
              name={route.name}
              info={info}
              schema={schema}
              tab={route.tab}
              run={route.run}
              event={event}
              onTab={(tab, run) => go({ name: route.name, tab, run: run ?? (tab === "runs" ? route.run : null) })}
              onSaved={refreshList}
              onDirty={onDirty}
            />
          ) : (
            <div className="empty">
              <p>{pipelines?.length ? "Pick a pipeline on the left." : info ? "No pipeline to show." : "Connecting…"}</p>
            </div>
          )}
        </main>
      </div>
    </div>
  );
}

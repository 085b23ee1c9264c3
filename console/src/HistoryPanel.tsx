// A pipeline's versions: view one, diff it against the current version, restore it.
import { useEffect, useState } from "react";
import { ApiError, type HistoryEntry, type Version, api, vlabel } from "./api";
import { DiffView, Modal, ago, when } from "./ui";

interface Props {
  name: string;
  base: Version;
  dirty: boolean;
  readOnly: boolean;
  refreshKey: number;
  onRestored(version: Version | undefined): void;
  onConflict(message: string): void;
}

export function HistoryPanel({ name, base, dirty, readOnly, refreshKey, onRestored, onConflict }: Props) {
  const [versions, setVersions] = useState<HistoryEntry[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [shown, setShown] = useState<{ title: string; kind: "yaml" | "diff"; text: string } | null>(null);
  const [busy, setBusy] = useState(false);

  useEffect(() => {
    let live = true;
    api
      .history(name)
      .then((v) => live && (setVersions(v), setError(null)))
      .catch((e: ApiError) => live && setError(e.message));
    return () => {
      live = false;
    };
  }, [name, refreshKey, base]);

  const view = async (v: Version) => {
    try {
      const r = await api.version(name, v);
      setShown({ title: `${name} ${vlabel(v)}`, kind: "yaml", text: r.yaml });
    } catch (e) {
      setError((e as Error).message);
    }
  };
  const diff = async (v: Version) => {
    try {
      const d = await api.diff(name, v);
      setShown({ title: `${vlabel(v)} → current`, kind: "diff", text: d });
    } catch (e) {
      setError((e as Error).message);
    }
  };
  const restore = async (v: Version) => {
    setBusy(true);
    try {
      const r = await api.restore(name, v, base);
      onRestored(r.version);
    } catch (e) {
      const err = e as ApiError;
      if (err.status === 409) onConflict(`${vlabel(String(err.body.current_version ?? ""))} was saved meanwhile: reload, then restore again.`);
      else setError(err.message);
    } finally {
      setBusy(false);
    }
  };

  return (
    <section className="history" aria-label="Version history" data-testid="history">
      {error && <div className="alert error">{error}</div>}
      {readOnly && <p className="muted">Read-only: the deployed pipelines change through git and cdk deploy; versions can be viewed, not restored.</p>}
      {!readOnly && dirty && <p className="muted">You have unsaved edits: save or revert them before restoring a version.</p>}
      {versions === null ? (
        <p className="muted">Loading…</p>
      ) : versions.length === 0 ? (
        <p className="muted">No versions recorded yet.</p>
      ) : (
        <table className="table">
          <thead>
            <tr>
              <th>version</th>
              <th>saved</th>
              <th>source</th>
              <th className="num">bytes</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {versions.map((h, i) => {
              const isCurrent = i === 0;
              return (
                <tr key={String(h.version)} data-testid={`history-${h.version}`}>
                  <td>
                    <b>{vlabel(h.version)}</b> {isCurrent && <span className="badge ok">current</span>}
                    {String(h.version) === String(base) && !isCurrent && <span className="badge warn">editing</span>}
                  </td>
                  <td title={when(h.saved_at)}>{ago(h.saved_at)}</td>
                  <td>{h.source}</td>
                  <td className="num">{h.bytes?.toLocaleString("en-US")}</td>
                  <td className="actions">
                    <button type="button" className="small" onClick={() => view(h.version)}>
                      View
                    </button>
                    <button type="button" className="small" disabled={isCurrent} onClick={() => diff(h.version)}>
                      Diff to current
                    </button>
                    {!readOnly && (
                      <button
                        type="button"
                        className="small"
                        disabled={isCurrent || dirty || busy}
                        title={dirty ? "save or revert your edits first" : "make this version the current one (a new version)"}
                        onClick={() => restore(h.version)}
                        data-testid={`restore-${h.version}`}
                      >
                        Restore
                      </button>
                    )}
                  </td>
                </tr>
              );
            })}
          </tbody>
        </table>
      )}
      {shown && (
        <Modal title={shown.title} onClose={() => setShown(null)} wide>
          {shown.kind === "diff" ? <DiffView diff={shown.text} /> : <pre className="code">{shown.text}</pre>}
        </Modal>
      )}
    </section>
  );
}

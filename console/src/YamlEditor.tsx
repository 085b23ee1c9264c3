// The YAML side: CodeMirror 6 with YAML highlighting and the API's issues as lint diagnostics
// at their lines. The text is owned by the parent; a new `value` from outside (an op's result,
// a reload) replaces only the span that differs, so the cursor stays where it was.
import { yaml } from "@codemirror/lang-yaml";
import { type Diagnostic, lintGutter, setDiagnostics } from "@codemirror/lint";
import { Annotation, EditorState } from "@codemirror/state";
import { EditorView, keymap } from "@codemirror/view";
import { basicSetup } from "codemirror";
import { forwardRef, useEffect, useImperativeHandle, useRef } from "react";
import type { Issue } from "./api";

export interface YamlEditorHandle {
  goTo(line: number, column?: number | null): void;
}

interface Props {
  value: string;
  issues: Issue[];
  onChange(text: string): void;
  onSave?(): void;
}

/** Marks the changes made from `value`, which are not reported back through onChange. */
const external = Annotation.define<boolean>();

const theme = EditorView.theme({
  "&": { height: "100%", fontSize: "12.5px", backgroundColor: "#fff" },
  ".cm-scroller": { fontFamily: "ui-monospace, SFMono-Regular, Menlo, Consolas, 'Liberation Mono', monospace", lineHeight: "1.45" },
  ".cm-gutters": { backgroundColor: "#f6f7f9", borderRight: "1px solid #e3e6ea", color: "#8a94a3" },
  ".cm-activeLineGutter": { backgroundColor: "#e9edf3" },
  ".cm-activeLine": { backgroundColor: "#f3f6fb" },
});

function diagnostics(doc: EditorState["doc"], issues: Issue[]): Diagnostic[] {
  const out: Diagnostic[] = [];
  for (const i of issues) {
    if (!i.line || i.line < 1) continue;
    const line = doc.line(Math.min(i.line, doc.lines));
    const col = i.column && i.column > 0 ? Math.min(i.column - 1, line.length) : 0;
    let from = line.from + col;
    if (from === line.to && col > 0) from = line.from;
    const to = line.to > from ? line.to : Math.min(from + 1, doc.length);
    out.push({
      from,
      to,
      severity: "error",
      source: i.field || undefined,
      message: i.hint ? `${i.message}\n${i.hint}` : i.message,
    });
  }
  return out;
}

export const YamlEditor = forwardRef<YamlEditorHandle, Props>(function YamlEditor({ value, issues, onChange, onSave }, ref) {
  const host = useRef<HTMLDivElement>(null);
  const view = useRef<EditorView | null>(null);
  const cb = useRef({ onChange, onSave });
  cb.current = { onChange, onSave };

  useEffect(() => {
    const v = new EditorView({
      parent: host.current!,
      state: EditorState.create({
        doc: value,
        extensions: [
          keymap.of([
            {
              key: "Mod-s",
              preventDefault: true,
              run: () => {
                cb.current.onSave?.();
                return true;
              },
            },
          ]),
          basicSetup,
          yaml(),
          lintGutter(),
          theme,
          EditorView.contentAttributes.of({ "aria-label": "Pipeline YAML" }),
          EditorView.updateListener.of((u) => {
            if (u.docChanged && !u.transactions.some((t) => t.annotation(external))) {
              cb.current.onChange(u.state.doc.toString());
            }
          }),
        ],
      }),
    });
    view.current = v;
    return () => {
      v.destroy();
      view.current = null;
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, []);

  useEffect(() => {
    const v = view.current;
    if (!v) return;
    const cur = v.state.doc.toString();
    if (cur !== value) {
      let start = 0;
      const max = Math.min(cur.length, value.length);
      while (start < max && cur.charCodeAt(start) === value.charCodeAt(start)) start++;
      let endCur = cur.length;
      let endNew = value.length;
      while (endCur > start && endNew > start && cur.charCodeAt(endCur - 1) === value.charCodeAt(endNew - 1)) {
        endCur--;
        endNew--;
      }
      v.dispatch({
        changes: { from: start, to: endCur, insert: value.slice(start, endNew) },
        annotations: external.of(true),
      });
    }
    v.dispatch(setDiagnostics(v.state, diagnostics(v.state.doc, issues)));
  }, [value, issues]);

  useImperativeHandle(ref, () => ({
    goTo(line: number, column?: number | null) {
      const v = view.current;
      if (!v) return;
      const l = v.state.doc.line(Math.max(1, Math.min(line, v.state.doc.lines)));
      const pos = l.from + Math.max(0, Math.min((column ?? 1) - 1, l.length));
      v.dispatch({ selection: { anchor: pos }, effects: EditorView.scrollIntoView(pos, { y: "center" }) });
      v.focus();
    },
  }));

  return <div className="yaml-editor" data-testid="yaml-editor" ref={host} />;
});

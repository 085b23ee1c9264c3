// Entry point: read ./config.json (local or AWS; on AWS sign in first), then render the app.
import "@xyflow/react/dist/style.css";
import "./styles.css";
import { StrictMode } from "react";
import { createRoot } from "react-dom/client";
import { loadConfig } from "./api";
import { App } from "./App";

const root = createRoot(document.getElementById("root")!);

loadConfig()
  .then(() =>
    root.render(
      <StrictMode>
        <App />
      </StrictMode>,
    ),
  )
  .catch((e: Error) =>
    root.render(
      <div className="boot-error" role="alert">
        <h1>stepcrawl console</h1>
        <p>{e.message}</p>
        <button type="button" onClick={() => location.reload()}>
          Try again
        </button>
      </div>,
    ),
  );

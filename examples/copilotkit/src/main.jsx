import { StrictMode } from "react";
import { createRoot } from "react-dom/client";
import "@copilotkit/react-ui/v2/styles.css";
import "./styles.css";
import { App } from "./App.jsx";
import { ThreadlineApp } from "./ThreadlineApp.jsx";

// `vite build --mode app` is the page Threadline serves at /app/; the default build is the example's.
const Page = import.meta.env.MODE === "app" ? ThreadlineApp : App;

createRoot(document.getElementById("root")).render(
  <StrictMode>
    <Page />
  </StrictMode>,
);

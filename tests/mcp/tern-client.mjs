// A driver of the official MCP TypeScript SDK's client, for tern's server tests
// (crates/tern-gateway/tests/suite/mcp_server.rs over HTTP, crates/tern-cli/tests/suite/mcp_serve.rs
// over stdio). It connects, then takes commands as JSON lines on stdin and answers as JSON lines
// on stdout, so a Rust test can interleave (decide in the inbox while a call waits).
//
//   node tern-client.mjs http URL [KEY]        streamable HTTP, KEY as the bearer token
//   node tern-client.mjs stdio COMMAND ARGS…   a server on stdio (environment inherited)
//
// Out: {"event":"connected","server":…,"sessionId":…} or {"event":"connect_failed","message","code"}
// (then exit 1). In: {"id",op:"list"} → {"id","tools":[…]};
// {"id",op:"call",name,arguments} → {"id","event":"progress",…}* then {"id","result"} or
// {"id","error"}; {"id",op:"cancel",target} aborts call `target` (notifications/cancelled).
// stdin's end closes the client and exits 0.

import { createInterface } from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const out = (v) => process.stdout.write(JSON.stringify(v) + "\n");

const [mode, ...rest] = process.argv.slice(2);
let transport;
if (mode === "http") {
  const [url, key] = rest;
  const headers = key ? { Authorization: `Bearer ${key}` } : {};
  transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
} else if (mode === "stdio") {
  const [command, ...args] = rest;
  transport = new StdioClientTransport({ command, args, env: process.env, stderr: "inherit" });
} else {
  console.error("usage: tern-client.mjs http URL [KEY] | stdio COMMAND ARGS…");
  process.exit(2);
}

const client = new Client({ name: "tern-test-client", version: "1.0.0" });
try {
  await client.connect(transport);
} catch (e) {
  out({ event: "connect_failed", message: String(e?.message ?? e), code: e?.code ?? null });
  process.exit(1);
}
out({
  event: "connected",
  server: client.getServerVersion(),
  instructions: client.getInstructions() ?? null,
  sessionId: transport.sessionId ?? null,
});

const running = new Map();

async function handle(cmd) {
  const { id } = cmd;
  try {
    if (cmd.op === "list") {
      const { tools } = await client.listTools();
      out({ id, tools });
    } else if (cmd.op === "call") {
      const controller = new AbortController();
      running.set(id, controller);
      const result = await client.callTool(
        { name: cmd.name, arguments: cmd.arguments ?? {} },
        undefined,
        {
          signal: controller.signal,
          timeout: 600_000,
          resetTimeoutOnProgress: true,
          onprogress: (p) => out({ id, event: "progress", ...p }),
        },
      );
      out({ id, result });
    } else if (cmd.op === "cancel") {
      running.get(cmd.target)?.abort("cancelled by the test");
      out({ id, ok: true });
    } else {
      out({ id, error: `unknown op ${cmd.op}` });
    }
  } catch (e) {
    out({ id, error: String(e?.message ?? e), code: e?.code ?? null });
  } finally {
    running.delete(id);
  }
}

const pending = [];
const lines = createInterface({ input: process.stdin });
lines.on("line", (line) => {
  if (line.trim()) pending.push(handle(JSON.parse(line)));
});
lines.on("close", async () => {
  await Promise.allSettled(pending);
  await client.close();
  process.exit(0);
});

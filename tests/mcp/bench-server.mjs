// A minimal MCP server on the official TypeScript SDK, for `tern-bench mcp`: `echo` answers
// at once; `wait` answers only when cancelled, and writes the moment its request's
// cancellation arrived (the SDK aborts the request's signal on `notifications/cancelled`),
// as microseconds since the Unix epoch, to the file named by TERN_BENCH_CANCEL_LOG.
import { appendFileSync } from "node:fs";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const log = process.env.TERN_BENCH_CANCEL_LOG;
const server = new McpServer({ name: "tern-bench", version: "1.0.0" });

server.registerTool(
  "echo",
  { description: "Echoes back the input", inputSchema: { message: z.string() } },
  async ({ message }) => ({ content: [{ type: "text", text: `Echo: ${message}` }] }),
);

server.registerTool(
  "wait",
  { description: "Waits until cancelled", inputSchema: { id: z.string() } },
  async ({ id }, extra) =>
    new Promise((resolve) => {
      extra.signal.addEventListener("abort", () => {
        const us = Math.round((performance.timeOrigin + performance.now()) * 1000);
        if (log) appendFileSync(log, `${id} ${us}\n`);
        resolve({ content: [{ type: "text", text: "cancelled" }] });
      });
    }),
);

await server.connect(new StdioServerTransport());

// A minimal MCP server on the official TypeScript SDK that asks its client one question per
// call (`elicitation/create` with a single field), for the tests of questions answered in a
// chat: `confirm` asks a yes/no (boolean) `ok`, `name` asks a string `name`. The result is
// the client's answer as JSON: {"action": ..., "content": {...}}.
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const server = new McpServer({ name: "tern-ask", version: "1.0.0" });

const questions = {
  confirm: {
    message: "Deploy the release?",
    requestedSchema: {
      type: "object",
      properties: { ok: { type: "boolean", title: "Go ahead" } },
      required: ["ok"],
    },
  },
  name: {
    message: "What is the release called?",
    requestedSchema: {
      type: "object",
      properties: { name: { type: "string", title: "Release name" } },
      required: ["name"],
    },
  },
};

server.registerTool(
  "ask",
  {
    description: "Asks the user one question",
    inputSchema: { question: z.enum(["confirm", "name"]) },
  },
  async ({ question }) => {
    const answer = await server.server.elicitInput(questions[question]);
    const text = JSON.stringify({ action: answer.action, content: answer.content ?? null });
    return { content: [{ type: "text", text }] };
  },
);

await server.connect(new StdioServerTransport());

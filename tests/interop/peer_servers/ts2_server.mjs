// A server written with the TypeScript SDK 2.x (@modelcontextprotocol/server), served over stdio
// or, with @modelcontextprotocol/node, over Streamable HTTP (its createMcpHandler: 2026-07-28
// requests, and 2025-era traffic through its stateless legacy fallback).
//
//   node ts2_server.mjs NODE_MODULES_DIR stdio
//   node ts2_server.mjs NODE_MODULES_DIR http PORT     (http://127.0.0.1:PORT/mcp)
//
// The eliciting tool asks with a request on an initialize-based session (`elicitInput`) and,
// where that throws (a 2026-07-28 request), the way this SDK offers there: `inputRequired`,
// answered on the retry.
import { createServer } from "node:http";
import { createRequire } from "node:module";
import { join } from "node:path";

const [modules, transport, port] = process.argv.slice(2);
const require = createRequire(join(modules, "package.json"));
const { McpServer, acceptedContent, createMcpHandler, inputRequired, inputResponse } =
  require("@modelcontextprotocol/server");
const z = require("zod");

const NAME = z.object({ name: z.string() });

function build() {
  const server = new McpServer({ name: "ts2-peer", version: "1.0.0" });
  server.registerTool(
    "add",
    { description: "Add two integers.", inputSchema: z.object({ a: z.number().int(), b: z.number().int() }) },
    async ({ a, b }) => ({ content: [{ type: "text", text: String(a + b) }] }),
  );
  server.registerTool("greet", { description: "Ask the user's name." }, async (ctx) => {
    const reply = (text) => ({ content: [{ type: "text", text }] });
    const view = inputResponse(ctx.mcpReq.inputResponses, "name");
    if (view.kind === "elicit") {
      const named = acceptedContent(ctx.mcpReq.inputResponses, "name", NAME);
      return reply(named !== undefined ? `hello ${named.name}` : `no name (${view.action})`);
    }
    let answer;
    try {
      // An initialize-based session: a request on it. It throws on a 2026-07-28 request.
      answer = await ctx.mcpReq.elicitInput({ mode: "form", message: "Your name?", requestedSchema: z.toJSONSchema(NAME) });
    } catch {
      return inputRequired({ inputRequests: { name: inputRequired.elicit({ message: "Your name?", requestedSchema: NAME }) } });
    }
    return reply(answer.action === "accept" ? `hello ${answer.content.name}` : `no name (${answer.action})`);
  });
  server.registerPrompt(
    "haiku",
    { description: "A prompt with one argument.", argsSchema: z.object({ topic: z.string() }) },
    ({ topic }) => ({ messages: [{ role: "user", content: { type: "text", text: `Write a haiku about ${topic}.` } }] }),
  );
  server.registerResource("readme", "peer://readme", { mimeType: "text/plain" }, async (uri) => ({
    contents: [{ uri: uri.href, mimeType: "text/plain", text: "peer readme" }],
  }));
  return server;
}

if (transport === "http") {
  const { toNodeHandler } = require("@modelcontextprotocol/node");
  const handler = createMcpHandler(build);
  const serve = toNodeHandler(handler);
  const http = createServer((req, res) => {
    serve(req, res).catch((error) => {
      console.error(error);
      if (!res.headersSent) res.writeHead(500);
      res.end();
    });
  });
  http.listen(Number(port), "127.0.0.1");
  process.on("SIGTERM", () => {
    http.close();
    handler.close().finally(() => process.exit(0));
  });
} else {
  const { StdioServerTransport } = require("@modelcontextprotocol/server/stdio");
  await build().connect(new StdioServerTransport());
}

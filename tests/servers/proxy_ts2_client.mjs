// The TypeScript SDK 2.x client calling `book` through `mrtr proxy`, answering its two
// questions; prints each question and the result. node proxy_ts2_client.mjs MODE URL, MODE
// being its version negotiation mode: "legacy" or "auto" (2026-07-28). Run from beside the npm
// peers, where its imports resolve.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";

const [mode, url] = process.argv.slice(2);
const client = new Client(
  { name: "ts2-proxy", version: "1.0.0" },
  { capabilities: { elicitation: {} }, versionNegotiation: { mode } },
);
client.setRequestHandler("elicitation/create", async (req) => {
  console.log(`asked: ${req.params.message}`);
  const content = req.params.message.startsWith("Size") ? { size: "huge" } : { ok: true };
  return { action: "accept", content };
});
await client.connect(new StreamableHTTPClientTransport(new URL(url)));
console.log(`version: ${client.getNegotiatedProtocolVersion()}`);
const result = await client.callTool({ name: "book", arguments: { item: "ship" } });
console.log(`result: ${result.content.map((c) => c.text ?? "").join(" ")}`);
await client.close();

// The TypeScript SDK 1.x client running the matrix checks (the same list as checks.py).
// node ts1_client.mjs stdio COMMAND ARGS... | http URL | sse URL
// Prints one JSON line per check: {"check", "ok", "detail"}.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { SSEClientTransport } from "@modelcontextprotocol/sdk/client/sse.js";
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  EmptyResultSchema,
  ListRootsRequestSchema,
  LoggingMessageNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";

const STEP_MS = 20000; // per check: only reached when something hangs
const START_MS = 90000; // for the first, which starts the server (slow to import when loaded)
let started = false;
const [transportName, ...rest] = process.argv.slice(2);
const answers = { action: "accept", progress: [], logs: [] };

function emit(check, ok, detail) {
  console.log(JSON.stringify({ check, ok, detail: String(detail).slice(0, 400) }));
}

async function check(name, op, want) {
  let timer;
  try {
    const hang = new Promise((_, reject) => {
      const limit = started ? STEP_MS : START_MS;
      started = true;
      timer = setTimeout(() => reject(new Error(`no answer in ${limit} ms`)), limit);
    });
    const got = await Promise.race([op(), hang]);
    emit(name, Boolean(want(got)), JSON.stringify(got));
  } catch (err) {
    emit(name, false, `${err?.name}: ${err?.message}`);
  } finally {
    clearTimeout(timer);
  }
}

// The server's answer to a bad request: a JSON-RPC error with its code, or an isError result
// (an error without a code, such as "Not connected", is not an answer).
const isError = (t) =>
  typeof t === "string" && (t.startsWith("isError:") || /^raised: -?\d+ /.test(t));
const text = (items) => items.map((c) => c.text ?? "").join(" ");

const client = new Client(
  { name: "ts1-matrix", version: "1.0.0" },
  { capabilities: { elicitation: {}, sampling: {}, roots: { listChanged: true } } },
);
client.setRequestHandler(ElicitRequestSchema, async (req) => {
  if (answers.action !== "accept") return { action: answers.action };
  const content = req.params.message.startsWith("Where to") ? { city: "Paris" } : { name: "Ada" };
  return { action: "accept", content };
});
client.setRequestHandler(CreateMessageRequestSchema, async () => ({
  role: "assistant",
  content: { type: "text", text: "short" },
  model: "peer-model",
}));
client.setRequestHandler(ListRootsRequestSchema, async () => ({
  roots: [{ uri: "file:///peer/root" }],
}));
client.onerror = (err) => console.error(`client error: ${err?.message}`);
client.setNotificationHandler(LoggingMessageNotificationSchema, async (n) => {
  answers.logs.push(String(n.params.data));
});

async function call(name, args, options) {
  try {
    const result = await client.callTool({ name, arguments: args }, undefined, options);
    return result.isError ? `isError: ${text(result.content)}` : text(result.content);
  } catch (err) {
    return `raised: ${err.code} ${err.message}`;
  }
}

async function read(uri) {
  try {
    return text((await client.readResource({ uri })).contents);
  } catch (err) {
    return `raised: ${err.code} ${err.message}`;
  }
}

let transport;
if (transportName === "stdio") {
  transport = new StdioClientTransport({ command: rest[0], args: rest.slice(1), env: process.env });
} else if (transportName === "sse") {
  transport = new SSEClientTransport(new URL(rest[0]));
} else {
  transport = new StreamableHTTPClientTransport(new URL(rest[0]));
}

await check("initialize", async () => {
  await client.connect(transport);
  return transport.protocolVersion ?? client.getServerVersion()?.name;
}, (v) => typeof v === "string");
await check("tools/list", async () => (await client.listTools()).tools.map((t) => t.name),
  (names) => ["add", "greet", "trip"].every((n) => names.includes(n)));
await check("tools/call", () => call("add", { a: 2, b: 3 }), (t) => t === "5");
for (const [action, want] of [["accept", "hello Ada"], ["decline", "no name (decline)"], ["cancel", "no name (cancel)"]]) {
  answers.action = action;
  await check(`elicit once (${action})`, () => call("greet", {}), (t) => t === want);
}
answers.action = "accept";
await check("elicit twice", () => call("trip", {}), (t) => t === "Ada to Paris");
await check("sampling", () => call("summarize", { text: "long" }), (t) => t === "short by peer-model");
await check("roots", () => call("roots", {}), (t) => t === "file:///peer/root");
await check("logging/setLevel", () => client.setLoggingLevel("info"), () => true);
await check("progress and logs", async () => {
  const t = await call("count", { n: 3 }, { onprogress: (p) => answers.progress.push(p.progress) });
  return `${t}; progress ${answers.progress.join(",")}; logs ${answers.logs.join(",")}`;
}, (t) => t === "counted 3; progress 1,2,3; logs step 1,step 2,step 3");
await check("prompt", async () => {
  const r = await client.getPrompt({ name: "haiku", arguments: { topic: "tea" } });
  return r.messages.map((m) => m.content.text ?? "").join(" ");
}, (t) => t.includes("tea"));
await check("resource", () => read("matrix://readme"), (t) => t === "matrix readme");
await check("template", () => read("matrix://items/7"), (t) => t === "item 7");
await check("unknown tool", () => call("nope", {}), isError);
await check("call after unknown tool", () => call("add", { a: 1, b: 1 }), (t) => t === "2");
await check("bad arguments", () => call("add", { a: "x" }), isError);
await check("call after bad arguments", () => call("add", { a: 2, b: 2 }), (t) => t === "4");
await check("unknown resource", () => read("matrix://missing"), isError);
await check("read after unknown resource", () => read("matrix://readme"), (t) => t === "matrix readme");
await check("unknown method", async () => {
  try {
    await client.request({ method: "matrix/unknown" }, EmptyResultSchema);
    return "answered";
  } catch (err) {
    return `raised: ${err.code} ${err.message}`;
  }
}, isError);
await check("call after unknown method", () => call("add", { a: 3, b: 3 }), (t) => t === "6");
await client.close();
process.exit(0);

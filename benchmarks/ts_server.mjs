// The TypeScript SDK v2 server the Inspector load rows compare with:
// `node benchmarks/ts_server.mjs NODE_MODULES_DIR`.
//
// `createMcpHandler` (from `@modelcontextprotocol/server`) serves 2026-07-28 requests and, by
// default, 2025-era traffic through its stateless legacy fallback, from one per-request server
// factory; `toNodeHandler` (from `@modelcontextprotocol/node`) mounts it on `node:http`. The
// factory registers the same `add` tool as the Python fixtures (two integers, their sum as
// text). Binds a free loopback port, prints `READY <port>` once listening; SIGTERM stops it.
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import { join } from 'node:path';

const modules = process.argv[2];
if (!modules) {
    console.error('usage: node ts_server.mjs NODE_MODULES_DIR');
    process.exit(2);
}
const require = createRequire(join(modules, 'package.json'));
const { createMcpHandler, McpServer } = require('@modelcontextprotocol/server');
const { toNodeHandler } = require('@modelcontextprotocol/node');
const z = require('zod');

function factory() {
    const server = new McpServer({ name: 'bench-ts', version: '1.0.0' });
    server.registerTool(
        'add',
        { description: 'Add two numbers.', inputSchema: z.object({ a: z.number().int(), b: z.number().int() }) },
        async ({ a, b }) => ({ content: [{ type: 'text', text: String(a + b) }] })
    );
    return server;
}

const handler = createMcpHandler(factory);
const serve = toNodeHandler(handler);
const http = createServer((req, res) => {
    serve(req, res).catch(error => {
        console.error(error);
        if (!res.headersSent) res.writeHead(500);
        res.end();
    });
});
http.keepAliveTimeout = 30_000;
http.listen(0, '127.0.0.1', () => {
    console.log(`READY ${http.address().port}`);
});
process.on('SIGTERM', () => {
    http.close();
    handler.close().finally(() => process.exit(0));
});

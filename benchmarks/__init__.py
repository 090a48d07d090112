"""Side-by-side benchmarks: mrtr against the official MCP Python SDK."""

"""Sans-IO protocol cores: JSON-RPC messages, SSE, and the Streamable HTTP rules of MCP."""

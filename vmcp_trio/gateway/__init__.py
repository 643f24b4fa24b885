"""vMCP: one MCP server in front of the members of an MCPGroup."""

"""The Python MCP SDK's server (`MCPServer`, formerly FastMCP) over streamable HTTP on
127.0.0.1, for tests/mcp.rs. argv: SDK_DIR PORT."""
import sys

sys.path.insert(0, sys.argv[1])
from mcp.server.mcpserver import MCPServer  # noqa: E402

app = MCPServer("weather")


@app.tool()
def forecast(city: str) -> str:
    """The weather forecast for a city."""
    return "sunny in %s (http-marker-51)" % city


app.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[2]))

"""MCP server entries for each agent client, one shape per client: Claude Code
(``.mcp.json``, managed), Claude Desktop, Cursor, Windsurf, VS Code, Gemini CLI
and Codex (``[mcp_servers.NAME]``).

Pure: spec -> plain data. It never adds a server the spec does not declare for
that client.
"""

from __future__ import annotations

from typing import Any

from ..spec.models import McpServer, Spec


def servers_for(spec: Spec, agent: str) -> list[tuple[str, McpServer]]:
    return [
        (name, srv)
        for name, srv in sorted(spec.mcp_servers.items())
        if srv.clients is None or agent in srv.clients
    ]


def _stdio(srv: McpServer) -> dict[str, Any]:
    entry: dict[str, Any] = {"command": srv.command, "args": list(srv.args)}
    if srv.env:
        entry["env"] = dict(srv.env)
    return entry


def mcp_claude(spec: Spec) -> dict[str, Any]:
    """Claude Code ``.mcp.json``: ``mcpServers`` with ``type`` for remote servers."""
    out: dict[str, Any] = {}
    for name, srv in servers_for(spec, "claude"):
        if srv.url is not None:
            out[name] = {"type": srv.transport, "url": srv.url}
        else:
            out[name] = {"type": "stdio", **_stdio(srv)}
    return {"mcpServers": out}


def mcp_claude_desktop(spec: Spec) -> dict[str, Any]:
    """Claude Desktop reads stdio servers only from its config file; remote
    servers are added by users as connectors, so they are left out here."""
    return {
        "mcpServers": {
            name: _stdio(srv)
            for name, srv in servers_for(spec, "claude_desktop")
            if srv.command is not None
        }
    }


def mcp_cursor(spec: Spec) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, srv in servers_for(spec, "cursor"):
        out[name] = {"url": srv.url} if srv.url is not None else _stdio(srv)
    return {"mcpServers": out}


def mcp_windsurf(spec: Spec) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, srv in servers_for(spec, "windsurf"):
        out[name] = {"serverUrl": srv.url} if srv.url is not None else _stdio(srv)
    return {"mcpServers": out}


def mcp_vscode(spec: Spec) -> dict[str, Any]:
    """VS Code ``.vscode/mcp.json``: a ``servers`` map with an explicit ``type``."""
    out: dict[str, Any] = {}
    for name, srv in servers_for(spec, "vscode"):
        if srv.url is not None:
            out[name] = {"type": "sse" if srv.transport == "sse" else "http", "url": srv.url}
        else:
            out[name] = {"type": "stdio", **_stdio(srv)}
    return {"servers": out}


def mcp_gemini(spec: Spec) -> dict[str, Any]:
    """Gemini CLI: ``httpUrl`` for streamable HTTP, ``url`` for SSE."""
    out: dict[str, Any] = {}
    for name, srv in servers_for(spec, "gemini"):
        if srv.url is not None:
            out[name] = {"url" if srv.transport == "sse" else "httpUrl": srv.url}
        else:
            out[name] = _stdio(srv)
    return out


def mcp_codex(spec: Spec) -> dict[str, Any]:
    """Codex ``[mcp_servers.NAME]``: each tool call is approved up front
    (``default_tools_approval_mode = "approve"``), so our hook, which sees every
    MCP call, decides instead of a second prompt ``codex exec`` cannot answer."""
    out: dict[str, Any] = {}
    for name, srv in servers_for(spec, "codex"):
        out[name] = {"url": srv.url} if srv.url is not None else _stdio(srv)
        out[name]["default_tools_approval_mode"] = "approve"
    return out

"""The agent clients' tools by name: what kind of call each built-in tool is,
and the verdict for tools judged by name alone.

Every built-in tool of the pinned Claude Code, Codex CLI and Gemini CLI has a
deliberate entry here (a test reads the tool list from each installed client
and fails when one appears that this table does not know):

- ``KINDS``: tools whose arguments the engine classifies (a shell command, a
  file read or write, a search, a fetch); ``hooks.calls`` builds the ``Call``.
- ``BY_NAME``: tools judged by their name: ``allow`` for the clients' own
  bookkeeping (plans, todos, sub-agents and schedules whose tool calls pass
  through the hooks again), ``escalate`` for tools that act outside those
  hooks (a git worktree the client creates itself, a workflow script, input
  typed into a running process).
- ``OWN_MCP``: our own MCP server's tools, under each client's naming
  (``mcp__agent-sandbox__X`` for Claude Code, ``mcp__agent_sandbox__X`` for
  Codex, which folds ``-`` into ``_``, and Gemini CLI's ``mcp_agent-sandbox_X``).

Stdlib only (the hook imports it). It never allows a tool it does not list:
an unknown name stays unknown, and the engine denies it.
"""

from __future__ import annotations

from ..spec.rules import Verdict

ALLOW, ESCALATE = Verdict.ALLOW, Verdict.ESCALATE

# search tools that read the files below their folder (their matches show content),
# judged as a recursive read (``Policy.check_tree``); the others list names only
CONTENT_SEARCH = frozenset({"Grep", "search_file_content", "grep_search", "grep",
                            "read_many_files"})

# tool name -> kind of call the engine classifies from its arguments
KINDS: dict[str, str] = {
    # Claude Code
    "Bash": "bash", "Monitor": "bash", "Read": "read", "NotebookRead": "read",
    "Write": "write", "Edit": "write", "MultiEdit": "write", "NotebookEdit": "write",
    "Glob": "search", "Grep": "search", "LS": "search",
    "WebFetch": "fetch", "WebSearch": "fetch",
    # Codex (the hook names its shell tool "Bash"; older builds send these)
    "shell": "bash", "local_shell": "bash", "exec_command": "bash", "unified_exec": "bash",
    "shell_command": "bash", "apply_patch": "write", "view_image": "read",
    "web_search": "fetch",
    # Gemini CLI
    "run_shell_command": "bash", "write_file": "write", "replace": "write", "edit": "write",
    "read_file": "read", "read_many_files": "search", "list_directory": "search",
    "glob": "search", "grep_search": "search", "search_file_content": "search", "grep": "search",
    "web_fetch": "fetch", "google_web_search": "fetch",
}

_CLIENT_BOOKKEEPING = (
    # Claude Code: plans, todos, questions, skills, sub-agents, messages, schedules,
    # MCP resources (reads through our MCP entries), background task control
    "TodoWrite", "Task", "Agent", "ExitPlanMode", "EnterPlanMode", "AskUserQuestion",
    "SlashCommand", "Skill", "ListMcpResourcesTool", "ReadMcpResourceTool",
    "ReadMcpResourceDirTool", "TaskOutput", "TaskStop", "KillShell", "KillBash",
    "BashOutput", "LSP", "CronCreate", "CronDelete", "CronList", "ListAgents",
    "SendMessage", "ReportFindings", "ScheduleWakeup", "WaitForMcpServers", "ToolSearch",
    "DeferredToolPlaceholder",
    # Claude Code 2.1.197 (what npm gives on Debian 12's node 20): its task list
    "TaskCreate", "TaskGet", "TaskList", "TaskUpdate",
    # Codex
    "update_plan", "request_user_input", "list_mcp_resources", "list_mcp_resource_templates",
    "read_mcp_resource", "get_goal", "create_goal", "update_goal", "multi_agent_v1",
    "multi_agent_v1.spawn_agent", "multi_agent_v1.send_input", "multi_agent_v1.wait_agent",
    "multi_agent_v1.close_agent", "multi_agent_v1.resume_agent",
    # Gemini CLI
    "save_memory", "write_todos", "update_topic", "enter_plan_mode", "exit_plan_mode",
    "invoke_agent", "activate_skill", "ask_user", "complete_task",
)
_OUTSIDE_THE_HOOKS = {
    # Claude Code creates and removes git worktrees itself (git metadata, no hook)
    "EnterWorktree": "creates a git worktree outside the hooks",
    "ExitWorktree": "may discard a git worktree outside the hooks",
    # a workflow may carry its own script
    "Workflow": "runs a workflow script outside the hooks",
    # Codex: keystrokes into a running process are a new command the hook cannot read
    "write_stdin": "types into a running process",
}
BY_NAME: dict[str, tuple[Verdict, str]] = {
    **{name: (ALLOW, "the client's own bookkeeping") for name in _CLIENT_BOOKKEEPING},
    **{name: (ESCALATE, f"{name} {why}") for name, why in _OUTSIDE_THE_HOOKS.items()},
}

OWN_SERVER_NAMES = ("agent-sandbox", "agent_sandbox")
OWN_MCP: dict[str, tuple[Verdict, str]] = {
    "sandbox_status": (ALLOW, "reads the sandbox's own status"),
    "check_request": (ALLOW, "follows a request already in the approval queue"),
    "run_privileged": (ESCALATE, "asks to run a command outside the agent"),
    "list_actions": (ALLOW, "lists the declared actions (never a credential)"),
    # a declared action only, its parameters checked; the server's own gate runs it at
    # once, shows its plan or waits for a human (approval.action_request): judged there, once
    "run_action": (ALLOW, "asks for a declared action through its own gate and approvals"),
}


def known(tool: str) -> bool:
    return tool in KINDS or tool in BY_NAME


def own_mcp_tool(name: str) -> str | None:
    """Our MCP tool's bare name in any client's spelling, else None."""
    for server in OWN_SERVER_NAMES:
        for prefix in (f"mcp__{server}__", f"mcp_{server}_", f"{server}__"):
            if name.startswith(prefix):
                bare = name[len(prefix):]
                return bare if bare in OWN_MCP else None
    return None


def own_mcp_verdict(name: str) -> tuple[Verdict, str] | None:
    bare = own_mcp_tool(name)
    return OWN_MCP[bare] if bare is not None else None

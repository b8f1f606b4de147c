"""Multi-turn episodes: environments, tools and tool-call formats (docs/environments.md)."""

from lit_rlhf.envs.environment import Environment, EnvSpec, as_env_spec
from lit_rlhf.envs.formats import TOOL_FORMATS, CompactFormat, HermesFormat, ToolFormat
from lit_rlhf.envs.tools import ToolCall, ToolCallError, call_with_timeout, run_tool_call, tool_schema

__all__ = ["TOOL_FORMATS", "CompactFormat", "EnvSpec", "Environment", "HermesFormat", "ToolCall", "ToolCallError",
           "ToolFormat", "as_env_spec", "call_with_timeout", "run_tool_call", "tool_schema"]

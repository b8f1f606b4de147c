"""How a model family writes tool calls and reads their results: a ToolFormat parses calls from the text of a
model turn and renders the results as the observation text appended after it (chat-template pieces included).

- compact: `<call>name(argument, ...)</call>` -> ` <result>text</result>`: for small models without a chat
  template (the embedded calculator task). Arguments are positional, comma-separated, taken as text.
- hermes: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` as Qwen2.5 and Hermes chat templates emit;
  the results come back as a user turn of `<tool_response>` blocks, as those templates render a tool message.
"""

from __future__ import annotations

import json
import re

from lit_rlhf.envs.tools import ToolCall, ToolCallError


class ToolFormat:
    name = ""

    def parse(self, text: str) -> list[ToolCall]:
        """The tool calls of a model turn ([] when it calls none); ToolCallError for a malformed one."""
        raise NotImplementedError

    def observation(self, results: list[str]) -> str:
        """The text appended after the model's turn: the results of its calls, in order."""
        raise NotImplementedError


class CompactFormat(ToolFormat):
    name = "compact"
    CALL = re.compile(r"<call>(.*?)</call>", re.DOTALL)
    NAME_AND_ARGS = re.compile(r"\s*([A-Za-z_]\w*)\((.*)\)\s*", re.DOTALL)

    def parse(self, text: str) -> list[ToolCall]:
        calls = []
        for body in self.CALL.findall(text):
            found = self.NAME_AND_ARGS.fullmatch(body)
            if found is None:
                raise ToolCallError(f"malformed call {body[:60]!r}: write <call>name(arguments)</call>")
            name, arguments = found.groups()
            calls.append(ToolCall(name, [a.strip() for a in arguments.split(",")] if arguments.strip() else []))
        if not calls and "<call>" in text:
            raise ToolCallError("a <call> without its </call>")
        return calls

    def observation(self, results: list[str]) -> str:
        return "".join(f" <result>{result}</result>" for result in results)


class HermesFormat(ToolFormat):
    name = "hermes"
    CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)

    def parse(self, text: str) -> list[ToolCall]:
        calls = []
        for body in self.CALL.findall(text):
            try:
                call = json.loads(body)
            except json.JSONDecodeError as err:
                raise ToolCallError(f"the tool call is not JSON ({err.msg} at character {err.pos})") from None
            except RecursionError:
                raise ToolCallError("the tool call's JSON is nested too deeply") from None
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                raise ToolCallError('a tool call must be {"name": ..., "arguments": {...}}')
            arguments = call.get("arguments") or {}
            if isinstance(arguments, str):  # some models write the arguments as a JSON string
                try:
                    arguments = json.loads(arguments)
                except (json.JSONDecodeError, RecursionError):
                    raise ToolCallError("the tool call's arguments are not a JSON object") from None
            if not isinstance(arguments, dict):
                raise ToolCallError("the tool call's arguments are not a JSON object")
            calls.append(ToolCall(call["name"], arguments))
        if not calls and "<tool_call>" in text:
            raise ToolCallError("a <tool_call> without its </tool_call>")
        return calls

    def observation(self, results: list[str]) -> str:
        # the turn ended with <|im_end|> (the stop token); a tool message is a user turn in Qwen2.5's template
        blocks = "\n".join(f"<tool_response>\n{result}\n</tool_response>" for result in results)
        return f"\n<|im_start|>user\n{blocks}<|im_end|>\n<|im_start|>assistant\n"


TOOL_FORMATS: dict[str, ToolFormat] = {f.name: f for f in (CompactFormat(), HermesFormat())}

"""Tool-call formats, tool schemas, the calculator tool: parsing against hand-written texts."""

import pytest

from lit_rlhf.envs import TOOL_FORMATS, EnvSpec, ToolCall, ToolCallError, run_tool_call
from lit_rlhf.errors import ConfigError
from lit_rlhf.tasks.calculator import CalculatorEnvironment, calculator
from tests.envs.scripted import EchoEnvironment, echo, undocumented


def test_compact_calls_parse_with_positional_arguments():
    parse = TOOL_FORMATS["compact"].parse
    assert parse(" <call>calculator(347*829)</call>") == [ToolCall("calculator", ["347*829"])]
    assert parse("a <call>f(1, 2)</call> b <call>g()</call>") == [ToolCall("f", ["1", "2"]), ToolCall("g", [])]
    assert parse(" Answer: 12") == []
    for bad in (" <call>347*829</call>", " <call>f(1)", " <call>f 1</call>"):
        with pytest.raises(ToolCallError):
            parse(bad)
    assert TOOL_FORMATS["compact"].observation(["7", "8"]) == " <result>7</result> <result>8</result>"


def test_hermes_calls_parse_as_qwen_writes_them():
    parse = TOOL_FORMATS["hermes"].parse
    text = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2*3"}}\n</tool_call><|im_end|>'
    assert parse(text) == [ToolCall("calculator", {"expression": "2*3"})]
    as_string = '<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}</tool_call>'
    assert parse(as_string) == [ToolCall("f", {"x": 1})]
    for bad in ("<tool_call>{name: f}</tool_call>", '<tool_call>{"arguments": {}}</tool_call>',
                '<tool_call>{"name": "f", "arguments": [1]}</tool_call>', "<tool_call>{"):
        with pytest.raises(ToolCallError):
            parse(bad)
    observation = TOOL_FORMATS["hermes"].observation(["6"])
    assert observation == "\n<|im_start|>user\n<tool_response>\n6\n</tool_response><|im_end|>\n<|im_start|>assistant\n"


def test_tool_results_and_failures():
    tools = {"calculator": calculator, "echo": echo}
    assert run_tool_call(ToolCall("calculator", ["347*829"]), tools, 5.0) == ("287663", False)
    assert run_tool_call(ToolCall("echo", {"text": "hi"}), tools, 5.0) == ("echo:hi", False)
    result, failed = run_tool_call(ToolCall("calculator", ["__import__('os').system('true')"]), tools, 5.0)
    assert failed and result.startswith("error: ValueError: only whole numbers")
    result, failed = run_tool_call(ToolCall("calculator", ["1//0"]), tools, 5.0)
    assert failed and result == "error: ZeroDivisionError: integer division or modulo by zero"
    assert run_tool_call(ToolCall("calculator", ["9" * 40 + "*" + "9" * 40]), tools, 5.0)[1]


def test_schemas_come_from_type_hints_and_docstrings():
    spec = EnvSpec(CalculatorEnvironment)
    assert spec.schemas[0]["function"]["name"] == "calculator"
    assert spec.schemas[0]["function"]["parameters"]["required"] == ["expression"]
    assert [s["function"]["name"] for s in EnvSpec(EchoEnvironment).schemas] == ["echo", "fail", "hang"]

    class Broken(CalculatorEnvironment):
        tools = [undocumented]

    with pytest.raises(ConfigError, match="the environment Broken: the tool 'undocumented' has no usable schema"):
        EnvSpec(Broken)

    class NotCallable(CalculatorEnvironment):
        tools = ["calculator"]

    with pytest.raises(ConfigError, match="the environment NotCallable: the tool 'calculator' is not callable"):
        EnvSpec(NotCallable)


@pytest.mark.parametrize("settings, message", [
    ({"max_turns": 0}, "env.max_turns=0 must be a whole number >= 1"),
    ({"max_tokens": 1}, "env.max_tokens=1 must be a whole number >= 2"),
    ({"tool_timeout_s": 0}, "env.tool_timeout_s=0 must be a number of seconds > 0"),
    ({"tool_timeout_s": float("inf")}, "env.tool_timeout_s=inf must be a number of seconds > 0 and at most 86400"),
    ({"tool_timeout_s": 1e12}, "env.tool_timeout_s=1000000000000.0 must be a number of seconds"),
    ({"turn_timeout_s": float("nan")}, "env.turn_timeout_s=nan must be a number of seconds"),
    ({"max_tool_calls": 0}, "env.max_tool_calls=0 must be a whole number >= 1"),
    ({"max_concurrency": 0}, "env.max_concurrency=0 must be a whole number >= 1"),
    ({"tool_format": "json"}, "env.tool_format='json' is not a tool format"),
])
def test_bad_episode_limits_are_one_line(settings, message):
    with pytest.raises(ConfigError, match=message):
        EnvSpec(CalculatorEnvironment, **settings)


def test_a_chat_template_shows_the_model_its_tools(tmp_path):
    from transformers import AutoTokenizer

    from tests.conftest import TINY_PYTHIA, make_datamodule

    tokenizer = AutoTokenizer.from_pretrained(TINY_PYTHIA)
    tokenizer.chat_template = ("{% if tools %}tools: {% for t in tools %}{{ t.function.name }} {% endfor %}{% endif %}"
                               "user: {{ messages[0].content }}")
    tokenizer.save_pretrained(tmp_path / "chat")
    dm = make_datamodule(tokenizer=str(tmp_path / "chat"), apply_chat_template=True)
    dm.tools = EnvSpec(CalculatorEnvironment).schemas
    dm.setup()
    text = dm.tokenizer.decode(dm.rows[0].ids)
    assert text.startswith("tools: calculator user: ")


def test_a_hermes_call_nested_thousands_deep_is_a_malformed_call_not_a_recursion_error():
    deep = "<tool_call>" + '{"a":' * 100_000 + "1" + "}" * 100_000 + "</tool_call>"
    with pytest.raises(ToolCallError, match="nested too deeply"):
        TOOL_FORMATS["hermes"].parse(deep)
    as_string = '<tool_call>{"name": "f", "arguments": "' + "[" * 100_000 + '"}</tool_call>'
    with pytest.raises(ToolCallError, match="not a JSON object"):
        TOOL_FORMATS["hermes"].parse(as_string)


def test_an_async_generator_tool_or_step_cannot_be_awaited_and_is_one_line():
    from lit_rlhf.envs import Environment, EnvSpec
    from lit_rlhf.errors import ConfigError

    async def lookup(query: str) -> str:
        """Looks a query up.

        Args:
            query: what to look up
        """
        yield "one"

    class StreamingTools(Environment):
        tools = [lookup]

    class StreamingStep(Environment):
        async def step(self, text):
            yield "more", False

    for env, name in ((StreamingTools, "lookup"), (StreamingStep, "step")):
        with pytest.raises(ConfigError, match=f"{name} is an async generator .* return the answer instead") as err:
            EnvSpec(env)
        assert "\n" not in str(err.value)


def test_an_async_def_reward_is_awaited():
    from lit_rlhf.rewards.protocol import call_reward

    async def length_reward(prompts, completions, answer):
        return [float(len(c)) + a for c, a in zip(completions, answer, strict=True)]

    assert call_reward(length_reward, ["p", "q"], ["ab", "c"], {"answer": [1, 2], "other": [0, 0]}) == [3.0, 3.0]

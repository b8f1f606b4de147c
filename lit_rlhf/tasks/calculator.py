"""The embedded tool-use task: questions such as "What is 347*829?" (three-digit products, beyond what the tiny
model computes in its head) with an `answer` column, and a `calculator` tool the model may call in the compact
format, `<call>calculator(347*829)</call>`, before it answers with `Answer: <integer>`.

    python train.py experiment=calculator_grpo      # env=calculator data=calculator model=tiny-calculator
"""

from __future__ import annotations

import ast
import operator
import warnings
from typing import Any

from lit_rlhf.envs import TOOL_FORMATS, Environment
from lit_rlhf.tasks.arithmetic import answers_match

OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
             ast.USub: operator.neg, ast.UAdd: operator.pos}
MAX_DIGITS = 30  # results past this are refused: a calculator, not a way to exhaust memory


def evaluate_expression(node: ast.AST) -> int:
    """Integer arithmetic on a parsed expression: numbers, + - * // and parentheses, nothing else."""
    if isinstance(node, ast.Expression):
        return evaluate_expression(node.body)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return within_digits(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        left, right = evaluate_expression(node.left), evaluate_expression(node.right)
        return within_digits(OPERATORS[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in OPERATORS:
        return OPERATORS[type(node.op)](evaluate_expression(node.operand))
    raise ValueError("only whole numbers, + - * // and parentheses")


def within_digits(value: int) -> int:
    """value, or ValueError when it has more than MAX_DIGITS digits (a number typed or computed)."""
    if abs(value) >= 10**MAX_DIGITS:
        raise ValueError(f"a number has more than {MAX_DIGITS} digits")
    return value


def calculator(expression: str) -> str:
    """Evaluates integer arithmetic exactly.

    Args:
        expression: whole numbers with + - * // and parentheses, e.g. 347*829
    """
    if len(expression) > 200:
        raise ValueError("the expression is longer than 200 characters")
    with warnings.catch_warnings():  # "3x" is a SyntaxError here, not a SyntaxWarning on the user's console
        warnings.simplefilter("ignore", SyntaxWarning)
        tree = ast.parse(expression.strip(), mode="eval")
    return str(evaluate_expression(tree))


class CalculatorEnvironment(Environment):
    """An episode of the calculator task: the model may call `calculator`; its last `Answer:` is scored (by the
    task's reward, or with reward=environment by reward(): 1 when the final turn's answer is the row's)."""

    tools = [calculator]

    def __init__(self, answer: Any = None):
        super().__init__(answer=answer)
        self.answer, self.final_turn = answer, None

    def step(self, text: str) -> tuple[str | None, bool]:
        self.final_turn = text  # a turn without a tool call ends the episode: its answer is scored
        return None, True

    def reward(self) -> float | None:
        if self.answer is None:
            return None
        return float(answers_match([self.final_turn or ""], [self.answer])[0])


class NoToolEnvironment(Environment):
    """The same episodes without the tool (the ablation): a call is answered with an error, and the model goes on
    unaided (it is not counted as a tool call: this environment has no tools)."""

    def step(self, text: str) -> tuple[str | None, bool]:
        if "<call>" in text:
            return TOOL_FORMATS["compact"].observation(["error: no tools here"]), False
        return None, True

"""The calculator task's environment with a tool of fixed latency (a service the tool would call): for
bench/concurrent_tools.py, as `env.factory._target_=slow_tools.SlowCalculatorEnvironment` with bench/ on PYTHONPATH."""

import time

from lit_rlhf.tasks.calculator import CalculatorEnvironment, calculator

LATENCY_S = 0.2


def slow_calculator(expression: str) -> str:
    """Evaluates integer arithmetic exactly, after a fixed latency.

    Args:
        expression: whole numbers with + - * // and parentheses, e.g. 347*829
    """
    time.sleep(LATENCY_S)
    return calculator(expression)


slow_calculator.__name__ = "calculator"  # the name the model calls


class SlowCalculatorEnvironment(CalculatorEnvironment):
    tools = [slow_calculator]

"""The vLLM engine's own process (rollout=vllm). One spawned process holds the `vllm.LLM`, with vLLM's scheduler
and model worker inside it (VLLM_ENABLE_V1_MULTIPROCESSING=0 and the "uni" executor), and answers the trainer
over a pipe: one request per rollout or weight sync, nothing per decoding step. The trainer's process keeps
its own state (vLLM's Transformers backend changes transformers' model classes in the process it runs in),
and a stuck engine can be stopped without leaving anything behind in the trainer.

The stops are the trainer's: the engine's process ignores Ctrl-C, SIGTERM and SIGHUP, which a terminal sends to its
whole process group (and a scheduler's preemption to every process of the job), and the trainer, which finishes its
RL step, sampling included, closes the engine at its exit (kills it if it does not end within seconds). The engine
ending on them failed that step ("the weight sync to the vLLM engine failed"), and a Ctrl-C printed the engine's
traceback.

Requests are (name, args) tuples: generate, rpc (a worker-extension method by name), sleep, wake_up, close.
Answers are ("ok", value) or ("error", "ExceptionType: message"): an exception in the engine reaches the trainer
as an EngineError with vLLM's own text, which VLLMEngine turns into one line where it knows the fix."""

from __future__ import annotations

import atexit
import multiprocessing
import os
import signal
import time
from typing import Any

PROCESS_NAME = "VLLMEngine"


class EngineError(RuntimeError):
    """An exception raised in the engine's process, as its type name and message."""


class EngineProcess:
    def __init__(self, settings: dict[str, Any], cores: list[int] | None):
        """Starts the process and waits until the engine has loaded (EngineError if it failed to). cores: on CPU,
        the cores the engine runs on, one torch thread each (None: as the trainer's process)."""
        context = multiprocessing.get_context("spawn")  # CUDA and OpenMP state must not be forked
        self.connection, child_end = context.Pipe()
        self.process = context.Process(target=serve, args=(child_end, settings, cores),
                                       name=PROCESS_NAME, daemon=True)
        self.process.start()
        atexit.register(self.end_at_exit)  # before multiprocessing's own exit handler, whose SIGTERM it ignores
        child_end.close()
        self.wait(None)

    def call(self, name: str, *args: Any, timeout_s: float | None = None) -> Any:
        """The engine's answer to a request; TimeoutError after timeout_s (the process is then stopped)."""
        self.connection.send((name, args))
        return self.wait(timeout_s)

    def wait(self, timeout_s: float | None) -> Any:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self.connection.poll(1.0):
            if not self.process.is_alive():
                raise EngineError(f"the engine's process exited (code {self.process.exitcode})")
            if deadline is not None and time.monotonic() > deadline:
                self.stop(graceful=False)  # it is busy with the request: it would not read "close"
                raise TimeoutError(f"no answer from the engine's process in {timeout_s:g} s")
        status, value = self.connection.recv()
        if status == "error":
            raise EngineError(value)
        return value

    def stop(self, graceful: bool = True, wait_s: float = 30.0) -> None:
        if graceful and self.process.is_alive():
            try:
                self.connection.send(("close", ()))
                self.process.join(wait_s)
            except (BrokenPipeError, OSError):
                pass
        self.kill()
        self.connection.close()

    def end_at_exit(self) -> None:
        """At the trainer's exit, an engine still running (the apps leave it to their exit) is asked to close: its
        process then ends as a process does, releasing its semaphores (killed, it left them to multiprocessing's
        resource tracker, which warned of "leaked semaphore objects" after every run). One still busy after a few
        seconds (a request in flight, a stuck engine) is killed."""
        self.stop(graceful=True, wait_s=5.0)

    def kill(self) -> None:
        atexit.unregister(self.end_at_exit)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


def stops_are_the_trainers() -> None:
    """In the engine's process: the signals that stop a run reach the trainer, which stops the engine."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)


def serve(connection, settings: dict[str, Any], cores: list[int] | None) -> None:
    """The engine process's loop: load the engine, then answer requests until "close"."""
    stops_are_the_trainers()
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the scheduler and the worker in this process
    try:
        import torch

        if cores:
            os.sched_setaffinity(0, cores)
            torch.set_num_threads(len(cores))
        from vllm import LLM

        llm = LLM(**settings)
    except Exception as err:  # reported to the trainer, which turns it into one line
        connection.send(("error", f"{type(err).__name__}: {err}"))
        return
    connection.send(("ok", None))
    handlers = {"generate": lambda prompts, params: generate(llm, prompts, params),
                "rpc": lambda method, args: llm.collective_rpc(method, args=args),
                "sleep": lambda level: llm.sleep(level=level), "wake_up": lambda: llm.wake_up()}
    while True:
        try:
            name, args = connection.recv()
        except EOFError:  # the trainer's process ended without closing the engine (its exit): end with it, quietly
            break
        if name == "close":
            break
        try:
            connection.send(("ok", handlers[name](*args)))
        except Exception as err:
            connection.send(("error", f"{type(err).__name__}: {err}"))


def generate(llm, prompts: list[list[int]], params: list[dict[str, Any]]) -> list[list[tuple]]:
    """Prompt by prompt, its completions as (token ids, the engine's logprob of each, or None)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    outputs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts],
                           [SamplingParams(**p) for p in params], use_tqdm=False)
    return [[(list(c.token_ids), None if c.logprobs is None else
              [step[token].logprob for step, token in zip(c.logprobs, c.token_ids, strict=True)])
             for c in output.outputs] for output in outputs]

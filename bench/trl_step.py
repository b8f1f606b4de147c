"""TRL's GRPOTrainer (or RLOOTrainer) on the benchmark's work, run where `import trl` works (`make setup-trl`).

    .venv-trl/bin/python bench/trl_step.py --model tiny --beta 0.04 [--full] --steps 5 --warmup 1   # one JSON line
    .venv-trl/bin/python bench/trl_step.py --algo rloo --beta 0.05 ...   # RLOOTrainer on bench/floor.py's work

The same work as bench/grpo_floor.py and `bench/lit_step.py --algo grpo`: 8 prompts x 4 generations per step,
exactly --new-tokens new tokens (min_new_tokens), temperature 0.7, top_k 0, top_p 1, loss_type dapo, beta, one
update per generation (num_iterations 1, no old-logprob forward), AdamW lr 1e-4, clipping at 1.0, VADER reward,
float32 (--dtype), LoRA r=16 on all linear layers or full fine-tuning. Three settings differ from TRL's defaults so
that the work is the same: bf16=False; gradient_checkpointing=False (TRL's default recomputes the forward in the
backward, the other two do not); optim="adamw_torch", torch.optim.AdamW with its defaults as the other two use it
(transformers' default is the fused AdamW kernel). --algo rloo: RLOOTrainer (the KL to the reference in the reward,
beta 0.05 as in bench/floor.py) on the same work.
Prompts are cut to their last 5 tokens before TRL sees them (as the others cut them). The step time is that of
TRL's training step (generation, reward, reference forward, loss, backward, optimizer); `generate()` is timed apart.
"""

from __future__ import annotations

import argparse
import functools
import json
import tempfile
import time

import torch
import workload as W
from datasets import Dataset
from transformers import AutoTokenizer, GenerationMixin, TrainerCallback
from trl import GRPOConfig, GRPOTrainer, RLOOConfig, RLOOTrainer
from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer


class StepTimer(TrainerCallback):
    """Wall and CPU seconds of each training step, and the seconds spent in generate() inside it."""

    def __init__(self):
        self.step_times, self.cpu_times, self.generation, self.rss_before_steps = [], [], [], None
        self.generating = 0.0
        original = GenerationMixin.generate

        @functools.wraps(original)
        def timed_generate(model, *args, **kwargs):
            start = time.perf_counter()
            try:
                return original(model, *args, **kwargs)
            finally:
                self.generating += time.perf_counter() - start

        GenerationMixin.generate = timed_generate

    def on_step_begin(self, args, state, control, **kwargs):
        if self.rss_before_steps is None:
            self.rss_before_steps = W.peak_rss_mib()
        self.generating, self.start, self.cpu_start = 0.0, time.perf_counter(), time.process_time()

    def on_step_end(self, args, state, control, **kwargs):
        self.step_times.append(time.perf_counter() - self.start)
        self.cpu_times.append(time.process_time() - self.cpu_start)
        self.generation.append(self.generating)


def cut_prompts(tokenizer, prompts: list[str]) -> list[str]:
    """Each prompt's last PROMPT_TOKENS tokens, as text."""
    return [tokenizer.decode(tokenizer(p).input_ids[-W.PROMPT_TOKENS:]) for p in prompts]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--new-tokens", type=int, default=W.NEW_TOKENS)
    parser.add_argument("--mixed", action="store_true", help="no forced length: responses stop at the stop token")
    parser.add_argument("--beta", type=float, default=0.04)
    parser.add_argument("--algo", default="grpo", choices=["grpo", "rloo"])
    parser.add_argument("--full", action="store_true", help="full fine-tuning instead of LoRA")
    parser.add_argument("--dtype", default="float32", help="the weights' dtype (bench/gpu.py: bfloat16)")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    memory_marks = {"after_imports": W.peak_rss_mib()}
    torch.manual_seed(0)
    path = W.model_path(args.model)
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    tokenizer.pad_token = "<|padding|>"  # pythia's pad token, distinct from EOS (as the others pick it)
    analyzer = SentimentIntensityAnalyzer()

    def vader(completions, **kwargs) -> list[float]:
        return [analyzer.polarity_scores(text)["compound"] for text in completions]

    steps = args.warmup + args.steps
    prompts = cut_prompts(tokenizer, W.training_prompts())
    dataset = Dataset.from_dict({"prompt": prompts})
    peft_config = None
    if not args.full:
        from peft import LoraConfig
        peft_config = LoraConfig(task_type="CAUSAL_LM", **W.LORA)
    timer = StepTimer()
    with tempfile.TemporaryDirectory() as output_dir:
        config_class, trainer_class = (GRPOConfig, GRPOTrainer) if args.algo == "grpo" else (RLOOConfig, RLOOTrainer)
        config = config_class(
            output_dir=output_dir, use_cpu=not torch.cuda.is_available(), bf16=False, fp16=False, seed=0,
            per_device_train_batch_size=W.PROMPTS_PER_STEP * W.SAMPLES_PER_PROMPT,
            num_generations=W.SAMPLES_PER_PROMPT, max_completion_length=args.new_tokens,
            generation_kwargs=None if args.mixed else {"min_new_tokens": args.new_tokens},
            temperature=W.TEMPERATURE, top_k=0, top_p=1.0, beta=args.beta, num_iterations=1,
            **({"loss_type": "dapo"} if args.algo == "grpo" else {}),
            learning_rate=W.LR, optim="adamw_torch", lr_scheduler_type="constant", max_grad_norm=W.MAX_GRAD_NORM,
            max_steps=steps, gradient_checkpointing=False, logging_steps=steps, save_strategy="no", report_to="none",
            disable_tqdm=True, dataloader_num_workers=0, model_init_kwargs={"dtype": getattr(torch, args.dtype)})
        trainer = trainer_class(model=path, reward_funcs=vader, args=config, train_dataset=dataset,
                              processing_class=tokenizer, peft_config=peft_config, callbacks=[timer])
        trainer.train()
    memory_marks["before_steps"] = timer.rss_before_steps
    measured = slice(args.warmup, None)
    generation = timer.generation[measured]
    forced_tokens = 0 if args.mixed else W.PROMPTS_PER_STEP * W.SAMPLES_PER_PROMPT * args.new_tokens  # per step
    report = W.report("trl", args.model, args.algo, timer.step_times[measured], timer.cpu_times[measured],
                      {"generation": generation}, [forced_tokens] * len(generation), device, memory_marks)
    print(json.dumps({**report, "beta": args.beta, "full": args.full}))


if __name__ == "__main__":
    main()

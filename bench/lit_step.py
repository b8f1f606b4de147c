"""lit_rlhf on the benchmark workload: RLOOModule (or PPOModule) under a plain Lightning Trainer.

    python bench/lit_step.py --model tiny --steps 5 --warmup 1 [--algo ppo] [--rollout vllm]   # prints one JSON line
    python bench/lit_step.py --rollout vllm_server --urls http://127.0.0.1:8000   # a running vllm serve of --model
    python bench/lit_step.py --algo grpo --beta 0.04 [--full]     # GRPO (dapo) as bench/grpo_vs_trl.py runs it
    python bench/lit_step.py --algo distill --model pythia-160m --teacher pythia-1b [--divergence generalized_jsd]

Phases are timed by wrapping the module's own methods (its rollout engine's sample, reference_logprobs, score, the
teacher's scoring, the policy forwards and backward) and hooks on the optimizer step; "other" is the rest of the step.
Distillation also reports `teacher_s`, the teacher's forwards per step wherever they run (with
divergence=generalized_jsd the update runs one more inside "policy forward/backward"), and `teacher_weights_mib`.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections import defaultdict

import lightning as L
import torch
import workload as W

from lit_rlhf import DistillationModule, GRPOModule, PPOModule, PromptDataModule, RLOOModule
from lit_rlhf.rewards import VaderSentiment
from lit_rlhf.rollout import HFEngine, VLLMEngine, VLLMServerEngine
from lit_rlhf.teachers.causal_lm import CausalLMTeacher

PHASES = {"rollout_engine.sample": "generation", "reference_logprobs": "reference forward",
          "sampler.score_components": "reward", "sampler.teacher_logprobs": "teacher forward",
          "old_logprobs_and_values": "policy forward/backward", "policy_forward_with_grad": "policy forward/backward",
          "minibatch_loss": "policy forward/backward", "manual_backward": "policy forward/backward",
          "clip_gradients": "optimizer"}


class GraphRecordings:
    """Counts the CUDA graphs torch.compile's CUDA graph trees record (reduce-overhead, the compiled default on
    CUDA). A replayed step records none; a step that records one has paid a warm-up and a capture, which a new
    address of a static input (a KV cache allocated anew) or a new shape causes. Reads torch's private manager:
    count is None where torch has none by that name, and stays 0 on a CPU."""

    count: int | None = 0

    @classmethod
    def install(cls) -> type[GraphRecordings]:
        """Wraps the manager's recording once per process."""
        try:
            from torch._inductor.cudagraph_trees import CUDAGraphTreeManager
        except ImportError:
            CUDAGraphTreeManager = None
        record = getattr(CUDAGraphTreeManager, "record_function", None)
        if record is None:
            cls.count = None
            return cls
        if getattr(record, "counted", False):
            return cls

        @functools.wraps(record)
        def counted(manager, *args, **kwargs):
            cls.count += 1
            return record(manager, *args, **kwargs)

        counted.counted = True
        CUDAGraphTreeManager.record_function = counted
        return cls


class StepTimer(L.Callback):
    """Times every RL step and the phases inside it; drops the warm-up steps."""

    def __init__(self, module, warmup: int, device: torch.device):
        self.warmup, self.device = warmup, device
        self.step_times, self.cpu_times, self.phases, self.tokens = [], [], defaultdict(list), []
        self.timer, self.step_tokens = W.PhaseTimer(device), 0
        self.sync_times, self.first_step_s = [], None
        self.recordings, self.measured_recordings = GraphRecordings.install(), 0
        self.teacher_times, self.teacher_seconds, self.teacher_start = [], 0.0, None
        for path, phase in PHASES.items():
            if phase == "teacher forward" and module.sampler.teacher is None:
                continue
            owner_path, _, method = path.rpartition(".")
            owner = getattr(module, owner_path) if owner_path else module
            setattr(owner, method, self.timed(getattr(owner, method), phase))

    def timed(self, fn, phase):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.timer(phase):
                out = fn(*args, **kwargs)
            if fn.__name__ == "sample":
                self.step_tokens += int(out.response_mask.sum())
            return out
        return wrapper

    def on_train_start(self, trainer, module):
        self.rss_before_steps = W.peak_rss_mib()
        optimizer = trainer.optimizers[0]  # hooks of the torch optimizer: every step, PPO's several included
        optimizer.register_step_pre_hook(lambda *_: self._optimizer_step_starts())
        optimizer.register_step_post_hook(lambda *_: self._optimizer_step_ends())
        teacher = getattr(module.sampler, "teacher", None)
        if teacher is not None:  # the teacher's forwards outside its scoring phase: the full-vocabulary loss's
            teacher.model.register_forward_pre_hook(lambda *_: self._teacher_forward_starts())
            teacher.model.register_forward_hook(lambda *_: self._teacher_forward_ends())

    def _teacher_forward_starts(self):
        if "teacher forward" not in W.OPEN_PHASES:  # that phase is timed as a whole
            W.sync(self.device)
            self.teacher_start = time.perf_counter()

    def _teacher_forward_ends(self):
        if self.teacher_start is not None:
            W.sync(self.device)
            self.teacher_seconds += time.perf_counter() - self.teacher_start
            self.teacher_start = None

    def _optimizer_step_starts(self):
        W.sync(self.device)
        self.optimizer_start = time.perf_counter()

    def _optimizer_step_ends(self):
        W.sync(self.device)
        self.timer.seconds["optimizer"] += time.perf_counter() - self.optimizer_start

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        W.sync(self.device)
        self.timer, self.step_tokens, self.teacher_seconds = W.PhaseTimer(self.device), 0, 0.0
        self.start, self.cpu_start = time.perf_counter(), time.process_time()
        self.recordings_before = self.recordings.count

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        W.sync(self.device)
        if module.rl_step == 1:  # the first step: compilation, where the decoding step is compiled, and warm-up
            self.first_step_s = time.perf_counter() - self.start
        if module.rl_step > self.warmup:
            if self.recordings.count is not None:
                self.measured_recordings += self.recordings.count - self.recordings_before
            if "rollout/weight_sync_s" in module.last_stats:
                self.sync_times.append(module.last_stats["rollout/weight_sync_s"])
            self.step_times.append(time.perf_counter() - self.start)
            self.cpu_times.append(time.process_time() - self.cpu_start)
            self.tokens.append(self.step_tokens)
            self.teacher_times.append(self.timer.seconds.get("teacher forward", 0.0) + self.teacher_seconds)
            for phase, seconds in self.timer.seconds.items():
                self.phases[phase].append(seconds)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--algo", default="rloo", choices=["rloo", "ppo", "grpo", "distill"])
    parser.add_argument("--teacher", default=None, help="distill: the teacher's shape (default: --model's)")
    parser.add_argument("--divergence", default="sampled_token", choices=["sampled_token", "generalized_jsd"],
                        help="distill: algo.divergence")
    parser.add_argument("--beta", type=float, default=0.04, help="grpo: the KL coefficient (0: no reference forward)")
    parser.add_argument("--full", action="store_true", help="full fine-tuning instead of LoRA")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--no-single-update", action="store_true",
                        help="ablation: keep the no-grad old-logprob forward (the path before the optimization)")
    parser.add_argument("--new-tokens", type=int, default=W.NEW_TOKENS)
    parser.add_argument("--mixed", action="store_true", help="no forced length: responses stop at the stop token")
    parser.add_argument("--rollout", default="hf", choices=["hf", "vllm", "vllm_server"],
                        help="the rollout engine; vllm: VLLMEngine with a 1 GiB KV cache (the weight sync is part of "
                             "its generation phase, and reported alone as weight_sync_s); vllm_server: "
                             "VLLMServerEngine on the running servers at --urls (merged weight sync, timed as vllm's)")
    parser.add_argument("--urls", nargs="+", default=None, help="vllm_server: the servers' URLs")
    parser.add_argument("--recompute-logits", action="store_true",
                        help="ablation: recompute the chunked logits in the backward whatever their size "
                             "(logits_budget_mib=null, the path before the budget)")
    parser.add_argument("--logits-chunk-size", type=int, default=None,
                        help="algo.logits_chunk_size (default: the library's)")
    parser.add_argument("--padded", action="store_true",
                        help="ablation: full logits of the padded batch (logits_chunk_size=null, padding_free=false)")
    parser.add_argument("--compile-mode", default="auto",
                        help="rollout.compile_mode: auto (the default: CUDA graphs on CUDA, plain generate() on a "
                             "CPU), none (plain generate()), or a torch.compile mode (e.g. default)")
    parser.add_argument("--no-merge-adapters", action="store_true",
                        help="ablation: sample with the LoRA adapters unmerged (rollout.merge_adapters=false)")
    parser.add_argument("--sampler", default="inverse_cdf",
                        help="rollout.token_sampler (generate: generate()'s own draw)")
    parser.add_argument("--no-shared-prefill", action="store_true",
                        help="ablation: a prefill per sample, not per prompt (rollout.shared_prefill=false)")
    parser.add_argument("--gradient-checkpointing", action="store_true",
                        help="model.gradient_checkpointing=true: activations recomputed in the backward")
    parser.add_argument("--merge-adapters", action="store_true",
                        help="sample with the LoRA adapters merged in any dtype (rollout.merge_adapters=true)")
    args = parser.parse_args()
    memory_marks = {"after_imports": W.peak_rss_mib()}
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    L.seed_everything(0, verbose=False)
    path = W.model_path(args.model)
    lora = None if args.full else W.LORA
    common = dict(model={"name_or_path": path, "dtype": args.dtype, "lora": lora,
                         "gradient_checkpointing": args.gradient_checkpointing}, reward=VaderSentiment(),
                  optimizer=functools.partial(torch.optim.AdamW, lr=W.LR), response_length=args.new_tokens,
                  temperature=W.TEMPERATURE, kl_coef=W.KL_COEF, missing_eos_penalty=1.0,
                  max_grad_norm=W.MAX_GRAD_NORM, reuse_rollout_forward=not args.no_single_update,
                  **({"logits_chunk_size": None, "padding_free": False} if args.padded else {}),
                  **({"logits_budget_mib": None} if args.recompute_logits else {}),
                  **({"logits_chunk_size": args.logits_chunk_size} if args.logits_chunk_size else {}),
                  **({} if args.mixed else {"generation_kwargs": {"min_new_tokens": args.new_tokens},
                                            "allow_biased_sampling": True}))  # fixed length
    if args.rollout == "vllm":
        common["rollout_engine"] = VLLMEngine(kv_cache_gib=1.0)
    elif args.rollout == "vllm_server":
        common["rollout_engine"] = VLLMServerEngine(urls=args.urls)
    else:
        common["rollout_engine"] = HFEngine(compile_mode=None if args.compile_mode == "none" else args.compile_mode,
                                            token_sampler=args.sampler, shared_prefill=not args.no_shared_prefill,
                                            merge_adapters=False if args.no_merge_adapters
                                            else args.merge_adapters or "auto")
    if args.algo == "rloo":
        module = RLOOModule(rloo_k=W.SAMPLES_PER_PROMPT, **common)
    elif args.algo == "grpo":  # TRL's GRPOTrainer on the same work: no missing-EOS penalty, dapo, beta
        common.update(kl_coef=args.beta, missing_eos_penalty=None)
        module = GRPOModule(num_generations=W.SAMPLES_PER_PROMPT, loss_type="dapo", **common)
    elif args.algo == "distill":  # the loaded teacher in the student's dtype, no task reward, no KL penalty
        common.update(kl_coef=0.0, missing_eos_penalty=None)
        teacher = CausalLMTeacher(W.model_path(args.teacher or args.model), dtype=args.dtype)
        module = DistillationModule(samples_per_prompt=W.SAMPLES_PER_PROMPT, divergence=args.divergence,
                                    teacher=teacher, **common)
    else:  # TRL's PPO defaults: 4 epochs over the rollout
        module = PPOModule(samples_per_prompt=W.SAMPLES_PER_PROMPT, num_ppo_epochs=4, **common)
    module.configure_model()
    timer = StepTimer(module, args.warmup, device)
    updates = module.hparams.num_ppo_epochs * module.hparams.num_mini_batches
    trainer = L.Trainer(max_steps=(args.warmup + args.steps) * updates, accelerator=device.type, devices=1,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, callbacks=[timer])
    trainer.fit(module, PromptDataModule(tokenizer=path, batch_size=W.PROMPTS_PER_STEP,
                                         max_prompt_length=W.PROMPT_TOKENS))
    memory_marks["before_steps"] = timer.rss_before_steps
    impl = ("lit_rlhf_no_single_update" if args.no_single_update else "lit_rlhf_padded" if args.padded
            else "lit_rlhf_recompute_logits" if args.recompute_logits else "lit_rlhf")
    report = W.report(impl, args.model, args.algo, timer.step_times, timer.cpu_times, timer.phases, timer.tokens,
                      device, memory_marks)
    report.update(rollout=args.rollout, beta=args.beta if args.algo == "grpo" else None, full=args.full,
                  first_step_s=timer.first_step_s,
                  cuda_graph_recordings_per_step=None if timer.recordings.count is None
                  else timer.measured_recordings / len(timer.step_times))
    if args.algo == "distill":
        report.update(teacher=args.teacher or args.model, divergence=args.divergence,
                      teacher_s=sum(timer.teacher_times) / len(timer.teacher_times),
                      teacher_weights_mib=sum(p.numel() * p.element_size()
                                              for p in module.sampler.teacher.model.parameters()) / 2**20)
    if timer.sync_times:
        report["weight_sync_s"] = sorted(timer.sync_times)[len(timer.sync_times) // 2]
    print(json.dumps(report))


if __name__ == "__main__":
    main()

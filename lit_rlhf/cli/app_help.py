"""The config groups each app's `--help` lists: ${app_groups:model,trainer,...} in an app's hydra.help.template.

Hydra's default help lists every group of conf/, which the apps share, so `python evaluate.py --help` offered
`trainer=` and `experiment=` it never reads; each app's template names its own groups instead (tests/cli/test_help.py
holds each list to the app's defaults list and each group's options to conf/)."""

from __future__ import annotations

import textwrap

GROUP_HELP = {
    "algo": "rloo, ppo, grpo, reinforce_pp, distill (on-policy distillation: teacher.name_or_path=...)",
    "model": "tiny (default, embedded), tiny-arithmetic, tiny-calculator, tiny-two-task (embedded), pythia-14m ... "
             "pythia-12b, qwen2.5-0.5b-instruct, causal_lm (model.name_or_path=...)",
    "data": "sentiment, arithmetic, calculator, two_task (bundled), files (data.dataset=FILE), tldr, gsm8k",
    "reward": "vader, reward_model, arithmetic, arithmetic_correct, arithmetic_format, math_verify, environment, "
              "http (a server), llm_judge (several: reward=[a,b] reward.weights.b=0.5)",
    "gold": "none, vader, arithmetic_correct: a gold reward logged (gold/score), never trained on",
    "teacher": "none, causal_lm, served, routed: algo=distill's teacher (algo=distill selects causal_lm)",
    "rollout": "hf (generate), vllm (a colocated vLLM engine), vllm_server (running vLLM servers): how responses are "
               "sampled",
    "env": "none (single-turn), calculator, calculator_no_tool: multi-turn episodes with tools",
    "trainer": "default, cpu, gpu, ddp, ddp_spawn, fsdp2 (sharded), deepspeed_zero2 and deepspeed_zero3 (untested: "
               "no DeepSpeed run in the tests; docs/scale.md)",
    "logger": "csv, tensorboard, wandb, many",
    "score_transforms": "none, reward_normalizer (applied to the scores before advantages)",
    "task_metrics": "none, exact_match, math_verify (eval/<name> on held-out prompts, apart from the reward)",
    "callbacks": "default (callbacks.<name>=null switches one off)",
    "experiment": "sentiment_tiny_rloo, sentiment_tiny_ppo, arithmetic_rloo, arithmetic_ppo, arithmetic_grpo, "
                  "arithmetic_reinforce_pp, arithmetic_distill, calculator_grpo, calculator_rloo, calculator_distill, "
                  "calculator_distill_large, two_task_grpo, two_task_distill, tldr_rloo_pythia1b, tldr_ppo_pythia1b, "
                  "gsm8k_grpo_qwen",
    "hparams_search": "rloo_optuna",
    "paths": "default",
    "pairs": "default: the preference pairs, set as data.* (data.dataset=FILE of prompt, chosen, rejected)",
    "completions": "default: the (prompt, completion) rows, set as data.* (data.dataset=FILE)",
    "pairs_run": "default: epochs, checkpoints and run directories (epochs=N, ckpt_path=...)",
    "dpo_tuning": "tiny: the model's own settings, taken with model=tiny (docs/preferences.md)",
    "reward_model_tuning": "tiny: the model's own settings, taken with model=tiny (docs/preferences.md)",
    "sft_tuning": "tiny, tiny-calculator: the model's own settings, taken with that model (docs/distillation.md)",
}
WIDTH = 118


def app_groups(*names: str) -> str:
    """The `Groups` block of an app's help: one entry per group named, its options wrapped under one another."""
    missing = [name for name in names if name not in GROUP_HELP]
    if missing:
        raise KeyError(f"no help for the config group(s) {missing}: add them to GROUP_HELP")
    name_width = max(len(name) for name in names)  # the options start in one column, past the longest name
    return "\n".join(textwrap.fill(GROUP_HELP[name], WIDTH, initial_indent=f"  {name:<{name_width}} ",
                                   subsequent_indent=" " * (name_width + 3), break_on_hyphens=False)
                     for name in names)

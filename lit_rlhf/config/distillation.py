"""DistillationConfig: on-policy distillation's settings (`algo=distill`), beside every algorithm's (RLHFConfig)."""

from dataclasses import dataclass

from lit_rlhf.config.algo import RLHFConfig
from lit_rlhf.config.registry import algorithm
from lit_rlhf.config.settings import setting
from lit_rlhf.config.validation import check_choice, check_number, check_setting_number
from lit_rlhf.errors import ConfigError

MAX_TASK_REWARD_COEF = 1000.0


DIVERGENCES = ("sampled_token", "generalized_jsd")


@algorithm("distill", target="lit_rlhf.algos.DistillationModule", arguments=("teacher",))
@dataclass
class DistillationConfig(RLHFConfig):
    samples_per_prompt: int = setting(4, "sequences the student samples per prompt (task_reward_coef > 0: >= 2, the "
                                         "group of the task reward's advantage)")
    task_reward_coef: float = setting(
        0.0, "the task reward's group-relative advantage ((r - group mean) / (group std + 1e-4), GRPO's) times this, "
             "added to every token's distillation advantage; 0: distillation alone (the reward is still logged)")
    kl_coef: float = setting(0.0, "a per-token KL penalty to the reference (the starting policy) in the advantage; "
                                  "0 (the default): none and no reference forward, the teacher is the anchor")
    loss_type: str = setting("dapo", "as for every algorithm; `dapo`, the token mean over the whole step however it "
                                     "is split, is what TRL's distillation trainers compute")
    divergence: str = setting(
        "sampled_token", "`sampled_token`: each sampled token's advantage log p_teacher - log p_student through the "
                         "policy loss (Thinking Machines' on-policy distillation); `generalized_jsd`: TRL GKDTrainer's "
                         "generalized_jsd_loss over the whole vocabulary at every sampled position, with algo.beta "
                         "(a loaded teacher)")
    iw_opd_gamma: float = setting(
        0.0, "divergence=sampled_token: TRL IW-OPD's position weights, each token's advantage times 1 + gamma (1 - "
             "the share of its sequence's total |advantage| before it); 0: unweighted (TRL IW-OPD at gamma 0)")
    beta: float = setting(0.5, "divergence=generalized_jsd: TRL GKDConfig's beta; 0 forward KL(teacher || student), "
                               "1 reverse KL(student || teacher), between: the generalized JSD")
    exopd_lambda: float = setting(
        1.0, "divergence=sampled_token: G-OPD's reward scale (Yang et al. 2026, arXiv 2602.12125), each token's "
             "advantage lambda (log p_teacher - log p_ref) - (log p_student - log p_ref) with the student's starting "
             "policy as reference (a reference forward per step); 1: standard on-policy distillation; > 1: ExOPD's "
             "reward extrapolation, which can carry a student past a teacher RL-trained from it")

    def __post_init__(self):
        super().__post_init__()
        check_number("samples_per_prompt", self.samples_per_prompt, minimum=1, integer=True)
        check_number("task_reward_coef", self.task_reward_coef, minimum=0)
        check_choice("divergence", self.divergence, DIVERGENCES)
        check_setting_number("algo.beta", self.beta, minimum=0, maximum=1)
        check_number("iw_opd_gamma", self.iw_opd_gamma, minimum=0)
        check_number("exopd_lambda", self.exopd_lambda, minimum=0)
        if self.exopd_lambda != 1.0 and self.divergence != "sampled_token":
            raise ConfigError(f"algo.exopd_lambda={self.exopd_lambda:g} scales the sampled-token advantage; with "
                              f"algo.divergence={self.divergence} set exopd_lambda=1 or divergence=sampled_token.")
        if self.task_reward_coef > MAX_TASK_REWARD_COEF:
            raise ConfigError(f"algo.task_reward_coef={self.task_reward_coef:g} must be <= {MAX_TASK_REWARD_COEF:g}: "
                              f"the task reward's advantage is unit-scale and the teacher's 0.01-1 nats per token, so "
                              f"past that the teacher's signal vanishes (and the loss overflows); for the task reward "
                              f"alone train with algo=grpo.")
        if self.task_reward_coef > 0 and self.samples_per_prompt < 2:
            raise ConfigError(f"algo.task_reward_coef={self.task_reward_coef} with algo.samples_per_prompt="
                              f"{self.samples_per_prompt}: the task reward's advantage is relative to the prompt's "
                              f"group; set samples_per_prompt >= 2 or task_reward_coef=0.")

"""Compare a trained policy with its reference. `python evaluate.py ckpt_path=...`; see README.md."""

import hydra
from omegaconf import DictConfig

from lit_rlhf.cli.errors import report_user_errors, run_hydra_app
from lit_rlhf.cli.resolvers import register_resolvers

register_resolvers()


@hydra.main(version_base="1.3", config_path="conf", config_name="evaluate")
def main(cfg: DictConfig) -> float:
    from lit_rlhf.cli.checks import check_before_imports
    from lit_rlhf.cli.evaluation_checks import check_evaluation

    check_before_imports(cfg, check_evaluation, records_results=False)  # a bad setting answers before the imports
    # once composed: a mistyped setting answers without Lightning's seconds
    from lit_rlhf.cli.evaluate import evaluate_until_stopped

    evaluation = report_user_errors(evaluate_until_stopped, cfg)
    return evaluation.summary["score_difference"]["mean"]


if __name__ == "__main__":
    run_hydra_app(main, "evaluate")

"""KTO on completions labelled desirable or not (or preference pairs). `python train_kto.py data.dataset=rows.jsonl`;
see docs/preferences.md."""

import hydra
from omegaconf import DictConfig

from lit_rlhf.cli.errors import run_hydra_app
from lit_rlhf.cli.resolvers import register_resolvers

register_resolvers()


@hydra.main(version_base="1.3", config_path="conf", config_name="train_kto")
def main(cfg: DictConfig) -> float | None:
    from lit_rlhf.cli.checks import check_before_imports, check_fitting_on_a_file

    check_before_imports(cfg, check_fitting_on_a_file)  # a bad setting answers before the imports below
    # imported once the config is composed: --help and a mistyped setting answer without Lightning's seconds
    from lit_rlhf.cli.preferences import train_kto
    from lit_rlhf.cli.train import run

    return run(cfg, task=train_kto, step_name="training step")  # the objective (optimized_metric), for Hydra sweepers


if __name__ == "__main__":
    run_hydra_app(main, "train_kto")

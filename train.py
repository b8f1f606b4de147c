"""Train a causal LM with RLHF. `python train.py algo=rloo model=pythia-1b`; see README.md."""

import hydra
from omegaconf import DictConfig

from lit_rlhf.cli.errors import run_hydra_app
from lit_rlhf.cli.resolvers import register_resolvers

register_resolvers()


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    from lit_rlhf.cli.checks import check_before_imports

    check_before_imports(cfg)  # a bad setting answers before the imports below (about ten seconds)
    # imported once the config is composed: --help and a mistyped setting answer without Lightning's seconds
    from lit_rlhf.cli.train import run

    return run(cfg)  # the objective, for Hydra sweepers


if __name__ == "__main__":
    run_hydra_app(main, "train")

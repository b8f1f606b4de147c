"""Serve any lit_rlhf reward over HTTP: `python -m lit_rlhf.serve reward=vader port=8000` (docs/rewards.md).

Train against it with `python train.py reward=http reward.url=http://127.0.0.1:8000`.
"""

from pathlib import Path

import hydra
from omegaconf import DictConfig

from lit_rlhf.cli.errors import report_user_errors, run_hydra_app
from lit_rlhf.cli.resolvers import register_resolvers

CONFIG_DIR = Path(__file__).resolve().parent / "conf"  # shipped in the package (the repository's conf/ links here)
register_resolvers()


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="serve")
def main(cfg: DictConfig) -> None:
    # imported once the config is composed (Lightning's seconds): --help and a mistyped key answer at once, and a
    # Ctrl-C or SIGTERM during the imports is the app's one line, not a traceback or a silent end
    from lit_rlhf.cli.serve import serve_reward

    report_user_errors(serve_reward, cfg)


if __name__ == "__main__":
    run_hydra_app(main, "serve", CONFIG_DIR)

"""trainer=ddp_spawn runs setup, the checks and the RL steps in spawned ranks; torch hands an error raised there back
as the rank's traceback in text (ProcessRaisedException). A lit_rlhf one-line error (a missing dataset column; a
reward server gone, UnavailableError, alike) is still one line, naming the rank, not the rank's whole traceback;
anything else keeps its traceback."""

import pytest
import torch.multiprocessing as mp

from lit_rlhf.cli.errors import user_error
from tests.cli.spawned_rank import raise_in_rank


def spawned_error(kind: str) -> BaseException:
    with pytest.raises(mp.ProcessRaisedException) as err:
        mp.start_processes(raise_in_rank, args=(kind,), nprocs=1, start_method="spawn")
    return err.value


@pytest.mark.parametrize("kind, line", [
    ("config", "rank 0: the reward correct needs the dataset column 'answer', which the prompts' rows do not have"),
    ("bug", None),  # not the user's to fix: the traceback stays
])
def test_a_one_line_error_of_a_spawned_rank_is_one_line(kind, line):
    assert user_error(spawned_error(kind)) == line

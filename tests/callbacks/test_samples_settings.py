"""GenerationSamples' settings: a count that is no whole number is one line naming the setting, not a ValueError
from deep in a forward pass (num_samples=0 divided a batch into steps of 0)."""

import pytest

from lit_rlhf.callbacks import GenerationSamples
from lit_rlhf.errors import ConfigError


@pytest.mark.parametrize("settings, line", [
    ({"num_samples": 0}, "callbacks.generation_samples.num_samples=0 must be a whole number >= 1."),
    ({"num_samples": 2.5}, "callbacks.generation_samples.num_samples=2.5 must be a whole number >= 1."),
    ({"num_sample_generations": -1}, "callbacks.generation_samples.num_sample_generations=-1 must be a whole number "
                                     ">= 0 (0: none during training)."),
    ({"every_n_steps": 0}, "callbacks.generation_samples.every_n_steps=0 must be a whole number >= 1 or null "
                           "(num_sample_generations decides)."),
])
def test_a_count_that_is_no_whole_number_is_one_line(settings, line):
    with pytest.raises(ConfigError) as err:
        GenerationSamples(**settings)
    assert str(err.value) == line


def test_the_counts_it_takes():
    GenerationSamples(num_samples=1, num_sample_generations=0, every_n_steps=None)
    GenerationSamples(every_n_steps=5)

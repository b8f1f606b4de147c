import pytest
import torch

from lit_rlhf.ops import leave_one_out_baseline, place_score_on_last_token, reward_to_go, rloo_advantages


def trl_reference_loop(rlhf_reward: torch.Tensor, local_batch_size: int) -> torch.Tensor:
    """The loop from shared/reference/trl-rloo-trainer.md (sample-major layout)."""
    advantages = torch.zeros_like(rlhf_reward)
    for i in range(0, len(advantages), local_batch_size):
        others = [rlhf_reward[j : j + local_batch_size] for j in range(0, len(advantages), local_batch_size) if i != j]
        advantages[i : i + local_batch_size] = rlhf_reward[i : i + local_batch_size] - torch.stack(others).mean(0)
    return advantages


def test_rloo_matches_trl_loop_on_its_sample_major_layout():
    rewards = torch.tensor([1, 2, 3, 2, 3, 4, 5, 6, 7, 8, 9, 10]).float()  # K=4 rows of B=3 prompts
    prompt_index = torch.arange(3).repeat(4)
    advantages = rloo_advantages(rewards, prompt_index)
    torch.testing.assert_close(advantages, trl_reference_loop(rewards, 3))
    assert advantages[0].item() == pytest.approx(1 - (2 + 5 + 8) / 3)  # TRL's hand check
    assert advantages[7].item() == pytest.approx(6 - (3 + 2 + 9) / 3)


@pytest.mark.parametrize("layout", ["prompt_major", "shuffled"])
def test_rloo_matches_a_plain_loop_for_other_layouts(layout):
    torch.manual_seed(0)
    num_prompts, k = 5, 3
    prompt_index = torch.arange(num_prompts).repeat_interleave(k)
    if layout == "shuffled":
        prompt_index = prompt_index[torch.randperm(len(prompt_index))]
    rewards = torch.randn(len(prompt_index))
    expected = torch.stack([
        rewards[i] - torch.stack([rewards[j] for j in range(len(rewards))
                                  if j != i and prompt_index[j] == prompt_index[i]]).mean()
        for i in range(len(rewards))])
    torch.testing.assert_close(rloo_advantages(rewards, prompt_index), expected)


def test_rloo_refuses_a_prompt_with_one_sample():
    with pytest.raises(ValueError, match="at least 2"):
        leave_one_out_baseline(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([0, 0, 1]))


def test_reward_to_go_matches_a_double_loop_and_ignores_padding():
    torch.manual_seed(0)
    rewards = torch.randn(4, 6)
    mask = torch.tensor([[1] * 6, [1] * 3 + [0] * 3, [1] + [0] * 5, [1] * 5 + [0]]).bool()
    for gamma in (1.0, 0.9):
        expected = torch.zeros_like(rewards)
        for n in range(4):
            for t in range(6):
                if mask[n, t]:
                    expected[n, t] = sum(gamma ** (u - t) * rewards[n, u] for u in range(t, 6) if mask[n, u])
        torch.testing.assert_close(reward_to_go(rewards, mask, gamma), expected)


def test_score_goes_on_the_last_response_token():
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]]).bool()
    placed = place_score_on_last_token(torch.tensor([2.0, 3.0, 4.0]), mask)
    assert placed.tolist() == [[0, 0, 2, 0], [0, 0, 0, 3], [4, 0, 0, 0]]

import lightning as L
import pytest
import torch
from rich import get_console

from lit_rlhf.callbacks import ModelSummaryTable

pytestmark = pytest.mark.integration  # runs a Trainer or an app


class TwoLayers(L.LightningModule):
    def __init__(self, example: bool, width: int = 3, second_dtype: torch.dtype = torch.float32):
        super().__init__()
        self.first, self.second = torch.nn.Linear(2, width), torch.nn.Linear(width, 3, dtype=second_dtype)
        self.second.requires_grad_(False)
        if example:
            self.example_input_array = torch.ones(1, 2)

    def forward(self, x):
        return self.second(self.first(x).to(self.second.weight.dtype))

    def training_step(self, batch):
        return self(batch).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.first.parameters(), lr=0.1)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.ones(2, 2), batch_size=2)


def printed_summary(module: L.LightningModule, precision: str = "32-true") -> str:
    trainer = L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        callbacks=[ModelSummaryTable()], precision=precision)
    with get_console().capture() as captured:
        trainer.fit(module)
    return captured.get()


@pytest.mark.parametrize("example", [False, True])
def test_the_summary_shows_flops_only_where_lightning_counted_them(example):
    text = printed_summary(TwoLayers(example))
    assert "first" in text and "second" in text
    assert "Trainable params: 9" in text and "Non-trainable params: 12" in text and "Total params: 21" in text
    assert "Modules in train mode: " in text and "Modules in eval mode: 0" in text
    assert ("FLOPs" in text) is example  # 0 when uncounted: the column and total are left out
    if example:
        assert "Total FLOPs: 30" in text and "In sizes" in text


def test_the_size_is_the_parameters_own_bytes_and_bf16_mixed_says_nothing(recwarn):
    """A frozen layer loaded in bfloat16 under bf16-mixed (trainer=gpu's precision): Lightning's estimate, from the
    precision, warned that it has no width for bf16-mixed and counted 4 bytes a parameter (0.120 MB here)."""
    module = TwoLayers(example=False, width=5000, second_dtype=torch.bfloat16)
    text = printed_summary(module, precision="bf16-mixed")
    size = (2 * 5000 + 5000) * 4 + (5000 * 3 + 3) * 2  # the float32 layer's bytes, then the bfloat16 one's
    assert f"Total params size (MB): {size / 1e6:,.3f}" in text  # 0.090
    assert not [w for w in recwarn if "model summary" in str(w.message)]

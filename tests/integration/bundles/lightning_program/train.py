"""A Lightning script reporting through TrainyardCallback: a small regression on random data, 2 CPU ranks
under Lightning's own DDP, its lengths taken from the job's spec."""

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from trainyard.lightning import TrainyardCallback


class Regression(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.log("loss", loss, sync_dist=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main() -> None:
    callback = TrainyardCallback()
    spec = callback.job.config.spec
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(512, 8, generator=generator)
    data = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=16)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_steps=spec.train.max_steps,
        callbacks=[callback],
        enable_checkpointing=False,
        enable_progress_bar=False,
        logger=False,
        default_root_dir=str(callback.job.run_dir),
    )
    trainer.fit(Regression(), data, ckpt_path=callback.resume_from_checkpoint())


if __name__ == "__main__":
    main()

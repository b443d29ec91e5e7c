"""A Hugging Face Trainer script reporting through TrainyardCallback: a 2-layer GPT-2 built from a config (no
download) on random tokens, its lengths taken from the job's spec."""

import torch
from torch.utils.data import Dataset
from trainyard.hf import TrainyardCallback
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class Tokens(Dataset):
    def __init__(self) -> None:
        self.ids = torch.randint(0, 64, (256, 16), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main() -> None:
    callback = TrainyardCallback()
    spec = callback.job.config.spec
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2))
    args = TrainingArguments(
        output_dir=str(callback.job.run_dir / "hf"),
        max_steps=spec.train.max_steps,
        per_device_train_batch_size=8,
        learning_rate=1e-3,
        logging_steps=spec.metrics.every_n_steps,
        save_steps=spec.checkpoint.every_n_steps,
        save_total_limit=spec.checkpoint.keep_last,
        use_cpu=True,
        report_to=[],
        disable_tqdm=True,
        seed=spec.train.seed,
    )
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[callback])
    trainer.train(resume_from_checkpoint=callback.resume_from_checkpoint())


if __name__ == "__main__":
    main()

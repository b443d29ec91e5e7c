"""A language model of the user's own, trained on a text corpus through the whole service: the corpus and
its tokenizer under TRAINYARD_DATA_DIR, the examples/tokens_lm bundle pushed by `trainyard submit --code`,
two ranks under the real worker and torchrun (in the sandbox, as every job with a bundle). The API checks
the files at submit; the ranks tokenize the corpus once, into the run directory, and read its windows."""

from __future__ import annotations

import json
from pathlib import Path

from tests.integration.jobs import metric_values, wait_status
from tests.integration.servers import ROOT, Stack
from tests.integration.test_cli_e2e import job_id_of, trainyard
from tests.unit.trainers.token_corpus import DOCUMENTS, save_tokenizer, write_jsonl

BUNDLE = ROOT / "examples" / "tokens_lm"


def test_a_text_corpus_trains_a_users_language_model(embedded_stack: Stack, tmp_path: Path) -> None:
    data_dir = Path(embedded_stack.env["TRAINYARD_DATA_DIR"])
    save_tokenizer(data_dir / "lm-tokenizer")  # the corpus's 10 words, [UNK] and <|endoftext|>
    write_jsonl(data_dir / "lm-corpus" / "docs.jsonl", DOCUMENTS * 40)
    spec = json.loads((BUNDLE / "spec.json").read_text())
    spec.pop("code")  # `submit --code DIR` pushes the bundle and fills it in
    spec["model"]["kwargs"] = {"vocab_size": 12, "width": 16}
    spec["data"] = {"dataset": "text", "root": "lm-corpus", "tokenizer": "lm-tokenizer", "block_size": 16}
    spec["train"] |= {"max_steps": 20, "batch_size": 16, "lr": 0.02}
    spec["checkpoint"] = {"every_n_steps": 10, "every_n_epochs": 0}
    spec["metrics"] = {"every_n_steps": 5}
    path = tmp_path / "text-lm.json"
    path.write_text(json.dumps(spec))

    run = trainyard(embedded_stack, "submit", path, "--code", BUNDLE, "--follow", timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    job_id = job_id_of(run.stdout)
    with embedded_stack.client() as client:
        wait_status(client, job_id, {"succeeded"})
        losses = metric_values(client, job_id, "loss")
        assert [step for step, _ in losses] == [5, 10, 15, 20]
        assert losses[-1][1] < 0.6 * losses[0][1], losses
        assert [step for step, _ in metric_values(client, job_id, "eval_loss")] == [14, 20]
    run_dir = Path(embedded_stack.env["TRAINYARD_RUNS_DIR"]) / str(job_id)
    assert len(list(run_dir.glob("data/text-*.bin"))) == 1, "two ranks, one tokenized corpus"

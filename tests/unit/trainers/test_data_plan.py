"""The plan says how a job's data is read and why; data options that do not fit the dataset, the strategy,
the device or the loss are refused at submit, naming the field and the fix."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from jobspec.data_plan import DataPath
from jobspec.plan import resolve_plan
from jobspec.problems import SpecError
from jobspec.spec import JobSpec

FOLDER = {"dataset": "image_folder", "root": "pets", "image_size": 224, "load_size": 256}


def spec(data: dict[str, Any], **sections: Any) -> JobSpec:
    return JobSpec.model_validate({"model": {"arch": "resnet18"}, "data": data, **sections})


@pytest.mark.parametrize(
    ("data", "gpus", "path", "reason"),
    [
        (FOLDER, [0], DataPath.BY_SIZE, "files x 196,608 bytes at 256 px) is at most 25% of the GPU's free"),
        (FOLDER, None, DataPath.BY_SIZE, "25% of the host's available memory per rank"),
        ({**FOLDER, "placement": "stream"}, None, DataPath.STREAM, "decoded per epoch by 2 loader workers"),
        ({**FOLDER, "placement": "stream", "decode": "gpu"}, [0], DataPath.STREAM, "the GPU (nvJPEG)"),
        ({**FOLDER, "placement": "gpu"}, [0], DataPath.RESIDENT, "data.placement=gpu: decoded once"),
        ({"dataset": "synthetic"}, None, DataPath.RESIDENT, "synthetic is held whole"),
    ],
)
def test_the_plan_says_how_the_data_is_read_and_why(
    data: dict[str, Any], gpus: list[int] | None, path: DataPath, reason: str
) -> None:
    plan = resolve_plan(spec(data, parallel={"gpus": gpus}))
    assert plan.data_path is path and reason in plan.data_reason, plan.data_reason


@pytest.mark.parametrize(
    ("data", "sections", "field", "fix"),
    [
        ({"dataset": "synthetic", "placement": "stream"}, {}, "data.placement", "use auto, gpu or cpu"),
        ({**FOLDER, "placement": "stream"}, {"parallel": {"strategy": "hogwild"}}, "data.placement", "ddp"),
        ({**FOLDER, "decode": "gpu"}, {}, "data.decode", "drop it"),
        ({"dataset": "synthetic", "augment": {"hflip": 0.5}}, {}, "data.augment", "drop it"),
        (
            {
                "dataset": "mnist",
                "root": "mnist",
                "augment": {"normalize": {"mean": [0.1, 0.1, 0.1], "std": [1, 1, 1]}},
            },
            {},
            "data.augment.normalize",
            "give one value for every channel",
        ),
        (
            {**FOLDER, "augment": {"mixup": 0.2}},
            {"train": {"loss": "mse"}},
            "data.augment.mixup",
            "cross_entropy",
        ),
        ({**FOLDER, "augment": {"hflip": 0.5}}, {"parallel": {"strategy": "hogwild"}}, "data.augment", "ddp"),
    ],
)
def test_data_options_that_do_not_fit_are_refused(
    data: dict[str, Any], sections: dict[str, Any], field: str, fix: str
) -> None:
    with pytest.raises(SpecError) as refused:
        resolve_plan(spec(data, **sections))
    problems = {problem.field: problem for problem in refused.value.problems}
    assert field in problems and fix in problems[field].fix, refused.value.problems


@pytest.mark.parametrize(
    ("augment", "message"),
    [
        ({"random_resized_crop": {"scale": [1.0, 0.5]}}, "put the smaller one first"),
        ({"normalize": {"mean": [0.5, 0.5], "std": [0.2]}}, "give as many of each"),
        ({"hflip": 1.5}, "less than or equal to 1"),
    ],
)
def test_augment_fields_are_checked_where_they_are_given(augment: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        spec({**FOLDER, "augment": augment})

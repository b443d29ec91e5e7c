"""A bundle's failures become UserCodeErrors whose message starts with the marker the worker matches, names
the spec's field, and shows the user's own file and line, never the trainer's or torch's frames."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import TensorDataset

from jobspec.spec import DataSpec
from tests.unit.trainers.conftest import WriteBundle
from trainers.data.user import load_user_data, user_data
from trainers.user_code import build_user_model
from trainers.user_errors import MARKER, UserCodeError, blaming

GOOD_MODEL = """
    from torch import nn

    def build(width=4):
        return nn.Linear(width, 2)
"""


def refused(call: object, *args: object, **kwargs: object) -> str:
    assert callable(call)
    with pytest.raises(UserCodeError) as error:
        call(*args, **kwargs)
    message = str(error.value)
    assert message.startswith(f"{MARKER}: "), message
    assert "trainers/" not in message and "site-packages" not in message, message
    return message


def test_a_good_factory_builds_the_model_with_the_specs_kwargs(write_bundle: WriteBundle) -> None:
    bundle = write_bundle({"models.py": GOOD_MODEL})
    model = build_user_model(bundle, "models:build", {"width": 3})
    assert isinstance(model, torch.nn.Linear) and model.in_features == 3


def test_a_syntax_error_shows_the_file_and_line(write_bundle: WriteBundle) -> None:
    bundle = write_bundle({"models.py": "import torch\n\ndef build(:\n    pass\n"})
    message = refused(build_user_model, bundle, "models:build", {})
    assert message.splitlines()[0].startswith(
        f"{MARKER}: importing models for model.factory raised SyntaxError"
    )
    assert "  models.py, line 3" in message and "def build(:" in message


def test_a_missing_module_lists_the_bundles_modules(write_bundle: WriteBundle) -> None:
    bundle = write_bundle({"models.py": GOOD_MODEL, "pkg/__init__.py": "", "pkg/data.py": ""})
    message = refused(build_user_model, bundle, "modles:build", {})
    assert (
        "model.factory 'modles:build': the code bundle has no module 'modles'; it has models, pkg" in message
    )
    assert "pkg.models" in refused(build_user_model, bundle, "pkg.models:build", {})


def test_a_missing_function_lists_what_the_module_defines(write_bundle: WriteBundle) -> None:
    bundle = write_bundle({"models.py": GOOD_MODEL + "\n    def loss(model, batch):\n        pass\n"})
    message = refused(build_user_model, bundle, "models:buld", {})
    assert "module models has no function 'buld'; it defines build, loss" in message


def test_a_missing_dependency_points_at_the_import_line(write_bundle: WriteBundle) -> None:
    bundle = write_bundle({"models.py": "import torch\nimport not_installed_anywhere\n"})
    message = refused(build_user_model, bundle, "models:build", {})
    assert "ModuleNotFoundError: No module named 'not_installed_anywhere'" in message
    assert "  models.py, line 2, in <module>\n    import not_installed_anywhere" in message


def test_a_module_named_like_an_installed_one_is_refused(write_bundle: WriteBundle) -> None:
    bundle = write_bundle({"json.py": GOOD_MODEL})
    assert "json is an installed module" in refused(build_user_model, bundle, "json:build", {})


def test_a_raising_factory_shows_the_raising_line(write_bundle: WriteBundle) -> None:
    source = """
        def helper(width):
            raise ValueError(f"width {width} is too small")

        def build(width=4):
            return helper(width)
    """
    bundle = write_bundle({"models.py": source})
    message = refused(build_user_model, bundle, "models:build", {"width": 1})
    lines = message.splitlines()
    assert lines[0] == f"{MARKER}: model.factory 'models:build' raised ValueError: width 1 is too small"
    assert lines[1:] == [
        "  models.py, line 5, in build",
        "    return helper(width)",
        "  models.py, line 2, in helper",
        '    raise ValueError(f"width {width} is too small")',
    ]


def test_kwargs_the_factory_does_not_take_point_at_its_definition(write_bundle: WriteBundle) -> None:
    bundle = write_bundle({"models.py": GOOD_MODEL})
    message = refused(build_user_model, bundle, "models:build", {"widht": 3})
    assert "unexpected keyword argument 'widht'" in message
    assert "(defined at models.py, line 3)" in message


def test_a_factory_returning_something_else_than_a_module_is_refused(write_bundle: WriteBundle) -> None:
    bundle = write_bundle({"models.py": "def build():\n    return {'weights': 1}\n"})
    message = refused(build_user_model, bundle, "models:build", {})
    assert "returned a builtins.dict, not a torch.nn.Module; return the model" in message


@pytest.mark.parametrize(
    ("returned", "fragment"),
    [
        ("[1, 2, 3]", "returned a builtins.list; return (train, val) or (train, val, collate)"),
        ("(list(range(8)), None)", "returned a builtins.list as its train split; return a torch.utils.data"),
        ("(TensorDataset(torch.ones(4)), None, 5)", "returned a builtins.int as collate; return a function"),
        ("(Unsized(), None)", "map-style Dataset without __len__"),
    ],
)
def test_a_data_factory_returning_the_wrong_shape_is_refused(
    write_bundle: WriteBundle, returned: str, fragment: str
) -> None:
    source = f"""
        import torch
        from torch.utils.data import Dataset, TensorDataset

        class Unsized(Dataset):
            def __getitem__(self, index):
                return torch.ones(1)

        def build():
            return {returned}
    """
    bundle = write_bundle({"data.py": source})
    spec = DataSpec.model_validate({"factory": "data:build"})
    assert fragment in refused(load_user_data, bundle, spec)


def test_a_data_factory_may_return_a_collate_and_no_held_out_split(tmp_path: Path) -> None:
    train = TensorDataset(torch.ones(4, 2), torch.zeros(4))
    data = user_data("data:build", tmp_path, (train, None, list))
    assert (data.train, data.val, data.collate) == (train, None, list)


def test_a_dataset_yielding_the_wrong_shape_fails_in_the_models_line(write_bundle: WriteBundle) -> None:
    """The model takes 3 channels and the data has 1: the conv in the bundle's forward raises."""
    source = """
        import torch
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 4, 3)

            def forward(self, x):
                return self.conv(x)

        def build():
            return Net()
    """
    bundle = write_bundle({"models.py": source})
    model = build_user_model(bundle, "models:build", {})
    with pytest.raises(UserCodeError) as error, blaming(str(bundle.root)):
        model(torch.ones(2, 1, 8, 8))
    lines = str(error.value).splitlines()
    assert lines[0].startswith(f"{MARKER}: your code raised RuntimeError: Given groups=1, weight of size")
    assert lines[1:] == ["  models.py, line 10, in forward", "    return self.conv(x)"]


def test_errors_outside_the_bundle_and_of_communication_keep_their_kind(write_bundle: WriteBundle) -> None:
    bundle = write_bundle({"models.py": GOOD_MODEL})
    with pytest.raises(KeyError), blaming(str(bundle.root)):
        raise KeyError("the trainer's own")
    source = (
        "import torch.distributed as dist\n\ndef build():\n    raise dist.DistBackendError('peer gone')\n"
    )
    bundle = write_bundle({"comms.py": source})
    with pytest.raises(dist.DistBackendError), blaming(str(bundle.root)):
        bundle.function("model.factory", "comms:build")()

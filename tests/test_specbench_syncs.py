"""tools/specbench_syncs.py's rules for which PyTorch calls on a CUDA tensor wait for the GPU (the CUDA source each
rule cites), on stand-in tensors, and the step's counts as the long request's less the short one's."""
import os

import yaml
from conftest import load_tool

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROFILE = os.path.join(ROOT, "engines", "transformers", "4.37.1.yaml")


class T:
    """A stand-in tensor: its rank, dtype and whether it is marked as on the GPU."""
    def __init__(self, ndim=1, dtype="torch.int64", gpu=True, numel=4):
        self.ndim, self.dtype, self._numel = ndim, dtype, numel
        self._specbench_cuda = gpu

    def numel(self):
        return self._numel


def test_a_list_or_a_host_tensor_indexing_a_cuda_tensor_is_copied_to_it_blocking():
    index = load_tool("specbench_syncs").index_syncs
    assert index([0, 1], T) == ["index"]
    assert index((slice(None), T(gpu=False)), T) == ["index"]
    assert index((slice(None), T()), T) == []  # a CUDA long index: a gather, no sync
    assert index((0, slice(1, 3)), T) == []


def test_a_0_dim_cuda_index_and_a_tensor_slice_bound_are_read_on_the_host():
    index = load_tool("specbench_syncs").index_syncs
    scalar = T(ndim=0)
    assert index((None, scalar, slice(None, scalar)), T) == ["read", "read"]
    assert index((slice(scalar, scalar),), T) == ["read", "read"]


def test_a_boolean_mask_sizes_its_output_unless_a_host_scalar_is_written_through_it():
    index = load_tool("specbench_syncs").index_syncs
    mask = T(ndim=2, dtype="torch.bool")
    assert index(mask, T) == ["size"]
    assert index(mask, T, value=-1.0, write=True) == []  # canDispatchToMaskedFill: masked_fill_
    assert index(mask, T, value=T(ndim=0, dtype="torch.float32", numel=1), write=True) == ["size"]
    assert index(mask, T, value=T(gpu=False, numel=1), write=True) == ["h2d"]
    assert index(T(ndim=2, dtype="torch.bool", gpu=False), T, value=T(ndim=0), write=True) == ["index"]


def test_reads_and_sized_outputs_sync_only_on_the_gpu():
    calls = load_tool("specbench_syncs").call_syncs
    assert calls("tolist", (T(),), {}, T, True) == ["read"]
    assert calls("tolist", (T(gpu=False),), {}, T, False) == []
    assert calls("unique", (T(),), {}, T, True) == ["size"]
    assert calls("where", (T(),), {}, T, True) == ["size"]
    assert calls("where", (T(), T(), T()), {}, T, True) == []
    assert calls("repeat_interleave", (T(), T()), {}, T, True) == ["size"]
    assert calls("repeat_interleave", (T(), T()), {"output_size": 8}, T, True) == []
    assert calls("topk", (T(), 10), {}, T, True) == []
    assert calls("copy_", (T(), T(gpu=False)), {}, T, True) == ["h2d"]
    assert calls("copy_", (T(), T(gpu=False)), {"non_blocking": True}, T, True) == []


def test_a_step_is_the_long_requests_count_less_the_short_ones_over_the_steps_between():
    per_step = load_tool("specbench_syncs").per_step
    short = {"loop.read": 30, "loop.h2d": 4, "forward.size": 10}
    long = {"loop.read": 60, "loop.h2d": 4, "forward.size": 20, "loop.index": 5}
    assert per_step(short, long, 10) == {"forward.size": 1.0, "loop.index": 0.5, "loop.read": 3.0}


def test_the_profiles_spec_bench_syncs_name_the_tool():
    host = yaml.safe_load(open(PROFILE))["speculative_host"]
    for key in ("inference_eagle2", "inference_eagle3", "inference_eagle", "medusa", "hydra", "ngram", "draft_model"):
        assert host[key]["syncs"]["kind"] == "counted"
        assert "tools/specbench_syncs.py" in host[key]["syncs"]["source"]
    assert host["draft_model"]["syncs_per_draft_step"]["value"] > 0


def test_gpt_fasts_model_module_does_not_hide_spec_benchs_model_package(tmp_path, monkeypatch):
    """tools/specbench_calls.py runs gpt-fast (model.py) and Spec-Bench's methods (model/ package) in one process:
    gpt-fast's modules are imported without staying in sys.modules, so `model.pld` still imports after it."""
    import sys
    gptfast, specbench = tmp_path / "gptfast", tmp_path / "specbench"
    (specbench / "model").mkdir(parents=True)
    gptfast.mkdir()
    (gptfast / "model.py").write_text("WHOSE = 'gpt-fast'\n")
    (gptfast / "tp.py").write_text("")
    (gptfast / "generate.py").write_text("from model import WHOSE\nimport tp\n")
    (specbench / "model" / "__init__.py").write_text("")
    (specbench / "model" / "pld.py").write_text("WHOSE = 'spec-bench'\n")
    monkeypatch.syspath_prepend(str(specbench))
    for name in ("model", "model.pld", "generate", "tp"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    generate, model = load_tool("specbench_calls").gptfast_modules(str(gptfast))
    assert generate.WHOSE == model.WHOSE == "gpt-fast"
    import importlib
    assert importlib.import_module("model.pld").WHOSE == "spec-bench"
    assert str(gptfast) not in sys.path

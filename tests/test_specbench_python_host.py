"""tools/specbench_python_host.py's split of a py-spy sample into PyTorch's time and Python's, and the measured input
it feeds: Spec-Bench's SpS round, whose assistant's generate() call is Python outside PyTorch calls."""
import os
from types import SimpleNamespace

import yaml
from conftest import load_tool

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROFILE = os.path.join(ROOT, "engines", "transformers", "4.37.1.yaml")


REQUEST = "<module> (specbench_python_host.py:200);long_request (specbench_python_host.py:95)"


def test_a_sample_is_pytorchs_when_a_libtorch_frame_lies_below_the_deepest_python_frame():
    classify = load_tool("specbench_python_host").classify
    inside = REQUEST + ";topK_genrate (eagle2/cnets.py:771);THPVariable_add (libtorch_python.so);memcpy (libc.so.6)"
    assert classify(inside) == ("long", "loop", True)


def test_a_sample_in_python_code_or_the_interpreter_under_it_is_pythons():
    classify = load_tool("specbench_python_host").classify
    assert classify(REQUEST + ";topK_genrate (eagle2/cnets.py:808)") == ("long", "loop", False)
    # the interpreter's own native frames (a dict lookup) under a Spec-Bench line are still that line's Python
    assert classify(REQUEST + ";topK_genrate (eagle2/cnets.py:808);lookdict (libpython3.11.so.1.0)")[2] is False


def test_pythons_own_torch_functions_count_as_pytorch_calls():
    classify = load_tool("specbench_python_host").classify
    stack = REQUEST + ";greedy_search (transformers/generation/utils.py:1);softmax (torch/nn/functional.py:1)"
    assert classify(stack)[2] is True


def test_a_models_forward_is_its_own_region_and_setup_outside_the_requests_is_left_out():
    classify = load_tool("specbench_python_host").classify
    forward = REQUEST + ";as_forward.<locals>._model_forward (specbench_python_host.py:81);forward (x.py:3)"
    assert classify(forward) == ("long", "forward", False)
    assert classify("<module> (specbench_python_host.py:200);worker (specbench_python_host.py:90)") is None


def test_a_kernel_is_a_call_that_is_not_a_view_or_a_metadata_read():
    launches = load_tool("specbench_python_host").launches
    assert launches(SimpleNamespace(__name__="topk"), ())
    assert not launches(SimpleNamespace(__name__="view"), ())
    assert not launches(SimpleNamespace(__name__="__getitem__"), (None, (slice(0, 1), 0)))
    assert launches(SimpleNamespace(__name__="__getitem__"), (None, [0, 1]))


def test_the_sps_round_carries_the_measured_python_of_the_assistants_generate_call():
    host = yaml.safe_load(open(PROFILE))["speculative_host"]["draft_model"]["per_request_us"]
    assert host["kind"] == "measured"
    assert "tools/specbench_python_host.py" in host["source"]
    assert host["value"] > 0

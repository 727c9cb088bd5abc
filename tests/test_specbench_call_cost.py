"""tools/specbench_call_cost.py's summary of a step: its host time inside PyTorch (the step's total, views and metadata
reads included) over the counted calls only (names in parentheses are timed, not counted)."""
from conftest import load_tool


def test_a_steps_time_is_its_total_over_the_counted_calls_only():
    summary = load_tool("specbench_call_cost").summary
    step = {"(total)": (120.0, 0.0), "add": (50.0, 4.0), "(view)": (10.0, 2.0), "cat": (30.0, 2.0)}
    assert summary(step) == {"inside_us": 120.0, "calls": 6.0, "inside_us_a_call": 20.0}

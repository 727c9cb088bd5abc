"""The start-up measurement (experiments/startup.py): a child's CPU counted from its own usage, the median of the
pairs' ratios. Not a timed test: the figure itself is measured with `specsim bench --startup`."""
from simulator.experiments.startup import child_cpu_s, median_ratio


def test_a_busy_child_counts_its_cpu_and_an_idle_one_little(tmp_path):
    busy = child_cpu_s(("-c", "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"),
                       str(tmp_path))
    idle = child_cpu_s(("-c", "import time; time.sleep(0.3)"), str(tmp_path))
    assert busy >= 0.3 and idle < 0.2


def test_the_median_of_the_pairs_ratios():
    assert median_ratio([(3.0, 1.0), (1.0, 1.0), (10.0, 2.0)]) == 3.0  # ratios 3, 1, 5

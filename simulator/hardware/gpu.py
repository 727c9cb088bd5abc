"""A rank: the GPU that runs kernels (roofline time) and the host thread that launches them (eager or CUDA graph).

Kernel time = max(FLOPs / achievable peak, bytes / achievable bandwidth, kernel floor). Eager launches cost host
time per kernel: a segment's launches sum to a normal (central limit) truncated at MIN_LAUNCH_FRACTION of their mean,
times a per-pass, per-rank lognormal speed factor; a CUDA graph costs one lognormal launch per pass and a device-side
gap per kernel node.
"""
from __future__ import annotations


import numpy as np

from ..cache import stored
from ..config.mirror import GPUSpec, HostSpec
from .normal import normal_quantile


class GPU:
    """Roofline timing of kernels on one GPU model."""

    def __init__(self, spec: GPUSpec):
        self.spec = spec
        self.bytes_per_us = spec.memory_bandwidth_GBps * spec.memory_efficiency * 1e3
        self.flops_per_us = {k: v * spec.compute_efficiency * 1e6 for k, v in spec.peak_TFLOPS.items()}
        self.floor_us = spec.kernel_floor_us

    def peak_flops_per_us(self, dtype: str) -> float:
        if dtype in self.flops_per_us:
            return self.flops_per_us[dtype]
        # fall back to the nearest wider format the GPU lists (e.g. int4 weights computed in bf16)
        for wider in ("bf16", "fp16", "fp8", "fp32"):
            if wider in self.flops_per_us:
                return self.flops_per_us[wider]
        return min(self.flops_per_us.values())

    def kernel_us(self, flops: float, nbytes: float, dtype: str) -> tuple[float, bool]:
        """(time, compute_bound) of one kernel."""
        compute = flops / self.peak_flops_per_us(dtype)
        memory = nbytes / self.bytes_per_us
        return max(compute, memory, self.floor_us), compute > memory and compute > self.floor_us


# A segment's launch time is never below this fraction of its mean. A guard, not a measured figure: it keeps the
# normal approximation's left tail positive, and binds only when z < -(1 - 0.1) sqrt(n) / cv (for n >= 4 launches at
# the shipped cv <= 0.3 that is z < -6, never in practice).
MIN_LAUNCH_FRACTION = 0.1


@stored
def _strata(samples: int, dims: int) -> np.ndarray:
    """0..samples-1 in every row (read-only): what a Latin hypercube permutes, copied from here (a contiguous copy
    is a memcpy, a broadcast one is not)."""
    strata = np.tile(np.arange(samples), (dims, 1))
    strata.flags.writeable = False
    return strata


def _latin_hypercube_uniforms(rng: np.random.Generator, samples: int, dims: int, rows: int | None = None) -> np.ndarray:
    """A Latin hypercube of uniforms, shape (dims, samples) (McKay, Beckman & Conover 1979), whose quantiles
    (normal_quantile, row by row) are standard normals.

    In every dimension the samples take each of the n = `samples` equal-probability strata once, in random order, at
    a uniform point within the stratum: u = (stratum + U) / n. Each draw is then exactly standard normal (a midpoint
    per stratum would not be: its variance is below 1, 0.98 at n = 64), and the set's mean has at most n / (n - 1)
    times the variance of n independent draws' (Owen 1997). A dimension's normals are the quantiles of its row
    alone, so a caller that needs some dimensions transforms only those rows (the same values); `rows` keeps the
    first rows alone (the random stream is consumed as for all of them).
    """
    strata = rng.permuted(_strata(samples, dims), axis=1)
    u = rng.random((dims, samples))[:rows]
    u += strata[:rows]  # (stratum + U) / n, in place: the same floats
    u /= samples
    edge = 2.0**-53  # (n - 1 + U) / n can round to 1.0: keep the quantile finite
    return np.clip(u, edge, 1.0 - edge, out=u)


def over_samples(values: np.ndarray, like: np.ndarray) -> np.ndarray:
    """Per-segment values (K,) spread over the samples of one rank of `like` (samples, ranks, K), laid out as it: an
    operand numpy streams alongside `like`, where a (K,) operand broadcast over `like`'s contiguous samples (the
    layout of stratified draws) is copied into a buffer at every step, ~3x the instructions of the arithmetic."""
    out = np.empty_like(like[:, :1, :])
    out[...] = values
    return out


class Host:
    """Host-side launch costs of the ranks of one TP group."""

    def __init__(self, spec: HostSpec):
        self.spec = spec
        # the graph launch's lognormal sigma and mean shift, computed once (a layer pass asks once per pass)
        self._graph_sigma = sigma = np.sqrt(np.log1p(spec.launch_jitter_cv**2))
        self._graph_shift = sigma**2 / 2

    @staticmethod
    def draws(rng: np.random.Generator, samples: int, ranks: int, segments: int,
              stratified: bool = False, launches: bool = True) -> tuple[np.ndarray | None, np.ndarray]:
        """The standard normals a pass needs: per launch segment (samples, ranks, segments), per rank speed.

        stratified: a Latin hypercube: in every dimension the samples take each of `samples` equal-probability
        strata once (at a random point within it, in random order), so a small set of passes covers the
        distribution evenly and the mean over the set has a far smaller error than independent draws.
        launches=False (a CUDA-graph pass, whose launch is one draw per rank): the per-segment normals are left out
        (None); the per-rank ones are the same values either way, the random stream being consumed alike.
        """
        if not stratified:
            return rng.standard_normal((samples, ranks, segments)), rng.standard_normal((samples, ranks, 1))
        return Host.normals(Host.hypercube(rng, samples, ranks, segments, launches), ranks, segments, launches)

    @staticmethod
    def hypercube(rng: np.random.Generator, samples: int, ranks: int, segments: int,
                  launches: bool = True) -> np.ndarray:
        """The uniforms of draws(stratified=True): (dimensions, samples), the ranks' speeds first, then per rank
        its segments; without launches the ranks' rows alone (the stream consumed alike)."""
        return _latin_hypercube_uniforms(rng, samples, ranks * (segments + 1), None if launches else ranks)

    @staticmethod
    def normals(cube: np.ndarray, ranks: int, segments: int, launches: bool = True,
                samples: list[int] | None = None) -> tuple[np.ndarray | None, np.ndarray]:
        """draws()' normals from its hypercube, for the given samples (columns; default all) in their order, laid
        out in memory as for all samples (numpy's reductions over them pick their order by layout)."""
        if samples is not None:
            cube = np.ascontiguousarray(cube[:, samples])
        count = cube.shape[1]
        skew = normal_quantile(cube[:ranks]).T.reshape(count, ranks, 1)
        if not launches:
            return None, skew
        return normal_quantile(cube[ranks:]).T.reshape(count, ranks, segments), skew

    def eager_launch_us(self, launches: np.ndarray, rng: np.random.Generator | None, samples: int, ranks: int,
                        draws: tuple | None = None) -> np.ndarray:
        """Host time to launch each segment's kernels: shape (samples, ranks, segments).

        One launch costs eager_launch_us with coefficient of variation launch_jitter_cv; the sum of a segment's n
        launches is taken as Normal(n mean, sqrt(n) cv mean) (central limit: n >= 4 per segment), truncated at
        MIN_LAUNCH_FRACTION of the mean. Each rank's host runs at a per-pass speed factor, lognormal with sigma rank_skew_cv and
        mean 1 (so skew spreads the ranks without changing the mean launch cost).
        Draws are standard normals scaled afterwards, so a parameter change moves every draw smoothly (common
        random numbers across what-if runs).
        """
        mean, cv = self.spec.eager_launch_us, self.spec.launch_jitter_cv
        z, skew_z = draws if draws is not None else self.draws(rng, samples, ranks, launches.shape[0])
        # launches * mean * max(1 + cv z / sqrt(launches), MIN_LAUNCH_FRACTION), the same floats, in place, with the
        # per-segment factors laid out as z (over_samples)
        times = cv * z
        times /= over_samples(np.sqrt(launches), z)
        times += 1.0
        np.maximum(times, MIN_LAUNCH_FRACTION, out=times)
        times *= over_samples(launches * mean, z)
        sigma = self.spec.rank_skew_cv
        if sigma > 0:
            times *= np.exp(sigma * skew_z - sigma**2 / 2)
        return times

    def graph_launch_us(self, rng: np.random.Generator | None, samples: int, ranks: int,
                        draws: tuple | None = None) -> np.ndarray:
        """Host time of one cudaGraphLaunch per rank: shape (samples, ranks), lognormal with the launch cv."""
        z = draws[1][:, :, 0] if draws is not None else rng.standard_normal((samples, ranks))
        return self.spec.graph_launch_us * np.exp(self._graph_sigma * z - self._graph_shift)

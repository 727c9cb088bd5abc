"""NCCL's tuning and topology constants, copied from ONE release: NVIDIA/nccl tag v2.29.7-1 (2026-02-27).

Nothing here is fitted: every number is NCCL's own, with the file it comes from. Indices follow NCCL's
(src/include/plugin/nccl_tuner.h): algorithms tree / ring / nvls / nvls_tree, protocols LL / LL128 / Simple,
hardware nvlink / pci / net, architecture volta / ampere / hopper / blackwell, columns N1 / N2 / N4 (one node, two
nodes, more). Latencies in us, bandwidths in GB/s (1 GB = 1e9 B), as NCCL's `time = lat + bytes / (1000 * bw)`.
"""
from __future__ import annotations

NCCL_VERSION = "2.29.7-1"
SOURCE = f"NVIDIA/nccl v{NCCL_VERSION}"

PROTOCOLS = ("LL", "LL128", "Simple")

# --- src/graph/tuning.cc: ncclTunerConstantsDefaults ----------------------------------------------------------
# .baseLatencies[algorithm][protocol]
BASE_LATENCY_US = {
    "tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4),
    "collnet_direct": (0.0, 0.0, 0.0), "collnet_chain": (0.0, 0.0, 0.0),
    "nvls": (0.0, 0.0, 0.0), "nvls_tree": (0.0, 0.0, 0.0),
    "pat": (8.0, 8.0, 8.0),
}
# .hwLatencies[hardware][algorithm][protocol]: the per-step ("hop") latency
HW_LATENCY_US = {
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4), "collnet_direct": (0.0, 0.0, 3.7),
               "collnet_chain": (0.0, 0.0, 2.8), "nvls": (0.0, 0.0, 25.0), "nvls_tree": (0.0, 0.0, 25.0),
               "pat": (0.0, 0.0, 4.0)},
    "pci": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7), "collnet_direct": (0.0, 0.0, 3.7),
            "collnet_chain": (0.0, 0.0, 2.8), "nvls": (0.0, 0.0, 0.0), "nvls_tree": (0.0, 0.0, 0.0),
            "pat": (0.0, 0.0, 4.0)},
    "net": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0), "collnet_direct": (0.0, 0.0, 31.0),
            "collnet_chain": (0.0, 0.0, 30.0), "nvls": (0.0, 0.0, 18.0), "nvls_tree": (0.0, 0.0, 20.9),
            "pat": (0.0, 0.0, 14.0)},
}
ARCHES = ("volta", "ampere", "hopper", "blackwell")
# .llMaxBws[arch (one node) or CPU vendor row (several nodes)][N1, N2, N4]: a cap on the whole LL bus bandwidth
LL_MAX_BW = {"volta": (39.0, 39.0, 20.4), "ampere": (87.7, 22.5, 19.0), "hopper": (141.0, 45.0, 35.0),
             "blackwell": (2 * 141.0, 2 * 45.0, 2 * 35.0)}
# .perChMaxRingLL128Bws, .perChMaxTreeLL128Bws, .perChMaxTreeBws, .perChMaxNVLSTreeBws [arch][N1, N2, N4], per channel
PER_CHANNEL_MAX_RING_LL128_BW = {"volta": (20.0, 20.0, 20.0), "ampere": (20.0, 20.0, 20.0),
                                 "hopper": (36.7, 36.7, 36.7), "blackwell": (40.0, 40.0, 40.0)}
PER_CHANNEL_MAX_TREE_LL128_BW = {"volta": (20.0, 20.0, 20.0), "ampere": (20.0, 20.0, 20.0),
                                 "hopper": (36.7, 36.7, 29.0), "blackwell": (55.6, 31.67, 20.0)}
PER_CHANNEL_MAX_TREE_BW = {"volta": (26.5, 18.5, 10.0), "ampere": (24.0, 23.6, 17.8),
                           "hopper": (38.7, 41.4, 36.0), "blackwell": (70.0, 42.8, 24.0)}
PER_CHANNEL_MAX_NVLS_TREE_BW = {"volta": (26.5, 18.5, 10.0), "ampere": (24.0, 23.6, 17.8),
                                "hopper": (0.0, 57.7, 45.5), "blackwell": (0.0, 96.0, 43.8)}
# nvlsEfficiency[arch]
NVLS_EFFICIENCY = {"volta": 0.0, "ampere": 0.0, "hopper": 0.85, "blackwell": 0.74}
# treeCorrectionFactor[protocol][log2(bytes / 64)], 64 B .. 512 MB; ncclTopoGetAlgoTime applies columns 0..22 to
# Tree all-reduce (and NVLSTree only on Blackwell + x86)
TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
}
TREE_CORRECTION_COLUMNS_USED = 23
# ncclTopoTuneModel's model refinements
LL_EFFICIENCY = 0.5               # ring LL: busBw * .5
LL128_EFFICIENCY = 0.92           # ring LL128: busBw * 0.92 (120/128)
TREE_ALLREDUCE_EFFICIENCY = 0.92  # tree all-reduce: busBw * .92
TREE_LL_DIVISOR = 3.8             # tree LL: busBw / 3.8
TREE_LL128_ONE_NODE = 7.0 / 9.0   # tree LL128 on one node: busBw * 7/9

# --- src/graph/topo.h: link bandwidths as NCCL's topology code assumes them, GB/s per direction ---------------
NVLINK_BW_PER_LINK = ((100, 40.1), (90, 20.6), (86, 12.0), (80, 20.0), (70, 20.0), (60, 18.0))  # (min sm, bw)
INTER_CPU_BW = {"intel_erp": 40.0, "intel_srp": 22.0, "intel_skl": 10.0, "intel_bdw": 6.0, "amd": 16.0,
                "power9": 32.0, "arm": 6.0}
LOC_BW = 5000.0
# src/graph/topo.cc: PCIe link bandwidth = width * speed / 80, speed per lane in 100 Mb/s units by generation
PCIE_SPEED_PER_LANE = {1: 15, 2: 30, 3: 60, 4: 120, 5: 240, 6: 480}

# --- src/graph/search.cc: the speeds (GB/s per channel) the channel search tries, single node ------------------
SPEED_ARRAY_INTRA = {
    "legacy": (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
    "sm90": (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
    "sm100": (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0),
}
# src/init.cc: MAXCHANNELS 64, ring/tree graphs search up to MAXCHANNELS/2; NCCL_MAX_NVLS_ARITY 32
# --- the channels and threads an operation launches (src/enqueue.cc topoGetAlgoInfo, src/graph/connect.cc) -----------
# ncclTopoPostset duplicates every ring/tree channel ("Duplication should be complete now"): comm->nChannels =
# min(MAXCHANNELS, 2 x the graph's channels), channel c + n running graph channel c's ring again
COMM_MAX_CHANNELS = 64
# ncclTopoTuneModel: maxThreads per protocol (device.h NCCL_LL_MAX_NTHREADS, NCCL_LL128_MAX_NTHREADS,
# NCCL_SIMPLE_MAX_NTHREADS; ring Simple starts at 256 when the ring's bwIntra x nChannels <= PCI_BW)
MAX_THREADS = {"LL": 512, "LL128": 640, "Simple": 512}
SIMPLE_PCI_THREADS = 256
PCI_BW = 12.0  # topo.h, GB/s (PCI Gen3 x16)
# comm.h NCCL_{LL,LL128,SIMPLE}_THREAD_THRESHOLD: bytes of work a thread must have before more threads and channels
# are used; ring LL's is multiplied by nRanks (tuning.cc, end of ncclTopoTuneModel)
THREAD_THRESHOLD = {"LL": 8, "LL128": 8, "Simple": 64}
MAX_CHANNELS = 32
MAX_NVLS_ARITY = 32
# ncclTopoDupChannels: channels are duplicated (bandwidth halved) when bwIntra >= 25, except on sm > 80 when
# bwIntra < 50 and there are more than 4 channels
DUP_MIN_BW = 25.0
DUP_SM80_MIN_BW = 50.0
# search pass 1 keeps lowering the speed while the next speed is above this fraction of the best found
SPEED_STEP_RATIO = 0.49


def arch(sm_version: int) -> str:
    """NCCL's compCapIndex (tuning.cc): >= 100 Blackwell, >= 90 Hopper, >= 80 Ampere, else Volta."""
    return "blackwell" if sm_version >= 100 else "hopper" if sm_version >= 90 else "ampere" if sm_version >= 80 else "volta"


def speed_array(sm_version: int) -> tuple[float, ...]:
    return SPEED_ARRAY_INTRA["sm100" if sm_version >= 100 else "sm90" if sm_version >= 90 else "legacy"]


def nvlink_bw_per_link(sm_version: int) -> float:
    """ncclTopoNVLinkBw (topo.h): the bandwidth NCCL assumes for one NVLink of this architecture."""
    if sm_version == 86:
        return 12.0
    return next((bw for sm, bw in NVLINK_BW_PER_LINK if sm_version >= sm and sm != 86), 20.0)


def pcie_bw(generation: int, width: int = 16) -> float:
    """NCCL's PCIe link bandwidth (topo.cc): width x per-lane speed / 80; Gen4 x16 = 24, Gen5 x16 = 48."""
    return width * PCIE_SPEED_PER_LANE[generation] / 80.0

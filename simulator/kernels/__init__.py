"""Kernel costs: what one kernel of a given shape costs on one GPU, from measured data or a shape-aware roofline.

shapes.py describes a kernel by its shape (GEMM M/N/K, attention batch / query / KV length, grouped MoE tokens);
measured.py looks shapes up in NVIDIA's silicon-measured aiconfigurator-core database (optional extra
`specsim[measured]`; measured_attention.py its attention and MLA); roofline.py costs any shape from the GPU's
datasheet figures and a few fitted efficiencies; timer.py picks the source per kernel and records which one answered, per kernel family.
"""

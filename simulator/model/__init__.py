"""What the model costs: weights, KV cache, FLOPs and kernels of a forward pass, per GPU."""

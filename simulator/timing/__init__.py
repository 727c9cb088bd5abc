"""What a pass and a step cost: the per-pass cost model (a pass shape on one machine as a plan of kernels and
collectives, the ranks' timelines in closed form, the fast fidelity's memoised samples, the layer and link passes)
and the random blocks the costs draw. No serving process lives here: simulator.serving runs the passes."""

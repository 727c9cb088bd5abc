"""What the machine is: GPUs and their hosts, the fabric between them, and collectives over it."""

"""Models that predict: the critical-path replay of the traced steps and the waves of a kernel on the SMs."""

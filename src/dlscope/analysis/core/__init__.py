"""The building blocks every measurement shares: the opened profile and its step selection, windows,
intervals, the classifiers of kernels, ops and host work, the summary."""

"""Demo workloads for trying diag: ordinary training scripts that know nothing about diag."""

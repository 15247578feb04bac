"""The directory ``diag run`` puts first on the workers' ``PYTHONPATH``: its
``sitecustomize.py`` installs the hook in torchrun workers only. Not imported by diag itself."""

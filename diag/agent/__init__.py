"""diag's in-process side: the in-job hook (``hook.py``) and, elsewhere, the node daemon."""

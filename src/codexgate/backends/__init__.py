"""What answers: the seam (base.py, scope.py, kinds.py) and a package per kind of upstream."""

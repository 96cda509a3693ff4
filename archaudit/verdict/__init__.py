"""The verdict stage: what stands behind each gate that excludes a target and whether the target
could run it (judge.py), the JIT-module inventory with the build-flags gates it judges the same way
(inventory.py), the patch that makes a software-only gate admit it (patch.py, with the
maintainers' comments at each edit: patch_warnings.py), one gate's evidence (explain.py), and the
identities that baselines (baseline.py) and the comparison of two scans (diff.py) match gates by.
Nothing is imported here, so that importing one of them loads only what it needs."""

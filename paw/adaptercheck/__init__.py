"""Will this adapter load on that base? Shape-only checks and the base resize that fixes a vocabulary mismatch.

- :mod:`paw.adaptercheck.fit`     :func:`~paw.adaptercheck.fit.check_fit` from tensor shapes (pure)
- :mod:`paw.adaptercheck.rebase`  grow a base's vocabulary tensors to what the adapter expects (pure)
"""

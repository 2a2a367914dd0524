"""The GPU benchmark runner: real FSDP2 training steps of a catalog architecture under torchrun, measured per
rank, and the microbenchmarks that calibrate the estimator. The only package that imports torch (the ``[bench]``
extra); the web app and the estimator never load it.

- ``runner``   the training steps and what they measure      - ``model``    the torch reference transformer
- ``micro``    GEMM and collective sweeps                    - ``measure``  saved-activation and state bytes on CPU
- ``presets``  named benchmark configurations                - ``report``   predictions, results, launch commands
- ``scaling``  an architecture scaled down by layers (torch-free)
- ``__main__`` ``python -m app.bench``: what torchrun starts on every rank
"""

"""The placement core: pure Python + NumPy, no I/O, no clock, no unseeded randomness.

Everything that decides where a pod goes lives here, so the services, the simulator, replay and the
benchmarks all drive the same code.
"""

"""What the tests share and that is not a test: real servers (a mock provider, redis-server, the
proxy under uvicorn), scripted providers, configuration factories and clients.

Test modules import from here, never from one another; fixtures built on these live in
``tests/conftest.py``.
"""

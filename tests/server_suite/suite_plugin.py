"""pytest plugin for running llama.cpp's server test suite offline (loaded with -p).

The suite's session fixture `load_server_presets` starts every preset server once so that
each downloads its model (ServerPreset.load_all). Offline, with server.sh swapping every
model for a local fixture, there is nothing to download, and a preset the server under
test cannot start (an embedding or router preset on pocket) would fail the whole session
instead of its own tests: load_all becomes a no-op. Nothing else of the suite changes.
"""


def pytest_sessionstart(session):
    import utils  # the suite's utils.py, on sys.path through its rootdir conftest

    utils.ServerPreset.load_all = staticmethod(lambda: None)

package main

// Version is the release of pollux: the binary, the metrics and decision
// contracts it speaks, and the Python worker package
// (worker/python/pollux/__init__.py, __version__), which must carry the
// same string; TestVersionMatchesPythonPackage checks it.
const Version = "0.1.0"

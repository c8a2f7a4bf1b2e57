"""The only code that touches ns-3 and cppyy: loader, C++ patches, network build, transport config."""

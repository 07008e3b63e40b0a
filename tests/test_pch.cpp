// The translation unit that builds tests/test_pch.hpp (see tests/CMakeLists.txt).

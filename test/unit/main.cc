// The Catch2 runner lives alone in this TU: it is slow to compile and never
// changes.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

// DOCTEST_CONFIG_IMPLEMENT as well as ..._WITH_MAIN: in a unity build a batch-mate may have included doctest.h
// before this file, and a second inclusion opens its implementation part only for DOCTEST_CONFIG_IMPLEMENT.
#define DOCTEST_CONFIG_IMPLEMENT
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

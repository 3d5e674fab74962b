// Declarations only (see ../../README.md).
#pragma once
#include <stdexcept>

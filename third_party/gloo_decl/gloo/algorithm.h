// Declarations only (see ../README.md).
#pragma once
#include "gloo/context.h"

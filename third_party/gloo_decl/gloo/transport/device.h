// Declarations only (see ../../README.md): devices travel as shared_ptr.
#pragma once
#include <memory>
namespace gloo::transport {
class Device;
class UnboundBuffer;
}  // namespace gloo::transport

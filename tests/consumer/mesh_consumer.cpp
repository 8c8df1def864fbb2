// Uses the whole library (meshgate::meshgate): a 2x4 DeviceMesh and the rank groups of its
// second dim, plus what the package says about itself.
#include <iostream>

#include "mesh/device_mesh.hpp"

int main() {
  const std::int64_t shape[] = {2, 4};
  const meshgate::DeviceMesh mesh = meshgate::DeviceMesh::create(shape, {"dp", "tp"});
  std::cout << "meshgate " << MESHGATE_PACKAGE_VERSION << " backends " << MESHGATE_BACKENDS << '\n';
  for (const auto& group : mesh.groups(std::string("tp"))) {
    for (const std::int64_t rank : group) std::cout << rank << ' ';
    std::cout << "| ";
  }
  std::cout << '\n';
  return 0;
}

// Uses one module target (meshgate::layout): parse a CuTe layout, coalesce it, print both.
#include <iostream>

#include "layout/layout.hpp"

int main(int argc, char** argv) {
  const char* text = argc > 1 ? argv[1] : "(2,(1,6)):(1,(6,2))";
  const meshgate::Layout layout = meshgate::parse_layout(text);
  std::cout << meshgate::to_string(layout) << " -> " << meshgate::to_string(meshgate::coalesce(layout))
            << '\n';
  return 0;
}

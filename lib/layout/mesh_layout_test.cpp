#include "layout/mesh_layout.hpp"

#include <gtest/gtest.h>

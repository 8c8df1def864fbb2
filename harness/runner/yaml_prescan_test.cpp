#include "yaml_prescan.hpp"

#include <gtest/gtest.h>

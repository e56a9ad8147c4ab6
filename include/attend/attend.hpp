// attend — fused, tiled transformer attention for CPUs. The umbrella header.
#pragma once

#include <attend/context.hpp>
#include <attend/dtype.hpp>
#include <attend/error.hpp>
#include <attend/isa.hpp>
#include <attend/kv_cache.hpp>
#include <attend/mha.hpp>
#include <attend/numa.hpp>
#include <attend/paged_kv_cache.hpp>
#include <attend/sdpa.hpp>
#include <attend/tensor_view.hpp>
#include <attend/version.hpp>

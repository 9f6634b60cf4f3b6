// A stable sort for the short lists gpusel orders: GPUs, a few dozen at most.
// This header includes no CUDA header.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace gpusel::detail {

// Sorts `items` by `less`, keeping equal items in their order, as
// std::stable_sort does. An insertion sort: quadratic, which a list of GPUs
// never notices, and a small fraction of std::stable_sort's merge machinery to
// compile in a header that every file including gpusel compiles.
template <class T, class Less>
void stable_sort_small(std::vector<T>& items, Less less) {
  for (std::size_t sorted = 1; sorted < items.size(); ++sorted)
    for (std::size_t i = sorted; i > 0 && less(items[i], items[i - 1]); --i) std::swap(items[i], items[i - 1]);
}

}  // namespace gpusel::detail

// PyTorch's `with torch.cuda.device(1):` example (the CUDA semantics page),
// line by line, with gpusel Devices and a DeviceGuard. Buffers come with
// gpusel::Buffer; here each line prints where its tensor would land.
//
// Runs anywhere: with fewer GPUs than the example names, it says which lines
// cannot run here and why, and that a program would fall back to the CPU.
#include <gpusel/gpusel.hpp>

#include <iostream>
#include <string>

namespace {

// Where a tensor made on `device` lands now: `cuda` means the current device.
gpusel::Device lands_on(const gpusel::Device& device) {
  if (device.is_cuda() && !device.has_index()) return gpusel::cuda(gpusel::current_device());
  return device;
}

void show(const std::string& python, const gpusel::Device& device) {
  std::cout << "  " << python << std::string(python.size() < 46 ? 46 - python.size() : 1, ' ') << "-> "
            << lands_on(device) << "\n";
}

}  // namespace

int main() {
  const gpusel::Device cuda = gpusel::cuda();                    // cuda = torch.device('cuda')
  const gpusel::Device cuda0 = gpusel::Device::parse("cuda:0");  // cuda0 = torch.device('cuda:0')
  const gpusel::Device cuda2 = gpusel::cuda(2);                  // cuda2 = torch.device('cuda:2')

  const int gpus = gpusel::device_count();
  std::cout << gpus << " GPU(s) visible\n";
  if (gpus < 3) {
    std::cout << "The example uses cuda:0, cuda:1 and cuda:2; on this machine "
              << (gpus == 0 ? gpusel::detail::describe_visible_devices() : "only " + std::to_string(gpus) + " exist")
              << ".\n"
              << "Where each tensor would land on a machine with 3 GPUs:\n"
              << "  x = torch.tensor([1., 2.], device=cuda0)      -> cuda:0\n"
              << "  with torch.cuda.device(1):                    DeviceGuard guard(1)\n"
              << "      a = torch.tensor([1., 2.], device=cuda) -> cuda:1 (cuda means the current device)\n"
              << "      b = torch.tensor([1., 2.]).cuda()       -> cuda:1\n"
              << "      d = torch.randn(2, device=cuda2)        -> cuda:2 (an explicit index wins)\n"
              << "  after the block, cuda means cuda:0 again.\n"
              << "Here a program would run on " << gpusel::preferred_device()
              << " (gpusel::preferred_device(): the current GPU, or the cpu when there is none).\n";
    return 0;
  }

  show("x = torch.tensor([1., 2.], device=cuda0)", cuda0);
  show("y = torch.tensor([1., 2.]).cuda()", cuda);
  {
    gpusel::DeviceGuard guard(1);  // with torch.cuda.device(1):
    std::cout << "  with torch.cuda.device(1):\n";
    show("    a = torch.tensor([1., 2.], device=cuda)", cuda);      // a on cuda:1
    show("    b = torch.tensor([1., 2.]).cuda()", cuda);            // b on cuda:1
    show("    b2 = torch.tensor([1., 2.]).to(device=cuda)", cuda);  // b2 on cuda:1
    show("    c = a + b", cuda);                                    // c on cuda:1
    show("    z = x + y", cuda0);                                   // z stays with x and y, on cuda:0
    show("    d = torch.randn(2, device=cuda2)", cuda2);            // an explicit index wins: cuda:2
    show("    e = torch.randn(2).to(cuda2)", cuda2);
    show("    f = torch.randn(2).cuda(cuda2)", cuda2);
  }
  show("after the block: torch.tensor(..., device=cuda)", cuda);  // back on cuda:0
  return 0;
}

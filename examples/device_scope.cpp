// PyTorch's `with torch.cuda.device(1):` example (the CUDA semantics page),
// line by line, with gpusel Buffers and a DeviceGuard, printing where each one
// lands as PyTorch's example prints get_device():
//
//   cuda = torch.device('cuda')                  const gpusel::Device cuda = gpusel::cuda();
//   cuda0 = torch.device('cuda:0')               const gpusel::Device cuda0 = gpusel::cuda(0);
//   cuda2 = torch.device('cuda:2')               const gpusel::Device cuda2 = gpusel::cuda(2);
//   x = torch.tensor([1., 2.], device=cuda0)     gpusel::Buffer<float> x({1, 2}, cuda0);
//   with torch.cuda.device(1):                   { gpusel::DeviceGuard guard(1);
//       a = torch.tensor([1., 2.], device=cuda)      gpusel::Buffer<float> a({1, 2}, cuda);   // cuda:1
//       b = torch.tensor([1., 2.]).cuda()            auto b = gpusel::Buffer<float>{1, 2}.cuda(); // cuda:1
//       d = torch.randn(2, device=cuda2)             gpusel::Buffer<float> d(2, cuda2);       // cuda:2
//
// On a machine with fewer than 3 GPUs it runs the lines that fit and says why
// the others cannot run there.
#include <gpusel/gpusel.hpp>

#include <iostream>
#include <string>

namespace {

void show(const std::string& line, const gpusel::Buffer<float>& buffer) {
  std::cout << "  " << line << std::string(line.size() < 52 ? 52 - line.size() : 1, ' ') << "-> " << buffer.device()
            << "\n";
}

}  // namespace

int main() {
  const int gpus = gpusel::device_count();
  std::cout << gpus << " GPU(s) visible\n";
  if (gpus < 2) {
    std::cout << "The example needs cuda:0 and cuda:1 (and cuda:2 for its last lines); here "
              << (gpus == 0 ? gpusel::no_cuda_device_reason().value_or("no CUDA device is visible")
                            : std::string("only cuda:0 exists"))
              << ".\nA program would run on " << gpusel::preferred_device() << " instead.\n";
    return 0;
  }
  try {
    const gpusel::Device cuda = gpusel::cuda();                    // cuda = torch.device('cuda')
    const gpusel::Device cuda0 = gpusel::Device::parse("cuda:0");  // cuda0 = torch.device('cuda:0')
    const gpusel::Device cuda2 = gpusel::cuda(2);                  // cuda2 = torch.device('cuda:2')

    gpusel::Buffer<float> x({1, 2}, cuda0);
    show("x = torch.tensor([1., 2.], device=cuda0)", x);  // cuda:0
    gpusel::Buffer<float> y = gpusel::Buffer<float>{1, 2}.cuda();
    show("y = torch.tensor([1., 2.]).cuda()", y);  // cuda:0, the current device
    {
      gpusel::DeviceGuard guard(1);  // with torch.cuda.device(1):
      std::cout << "  with torch.cuda.device(1):\n";
      gpusel::Buffer<float> a({1, 2}, cuda);
      show("    a = torch.tensor([1., 2.], device=cuda)", a);  // cuda:1: cuda means the current device
      gpusel::Buffer<float> b = gpusel::Buffer<float>{1, 2}.cuda();
      show("    b = torch.tensor([1., 2.]).cuda()", b);  // cuda:1
      gpusel::Buffer<float> b2 = gpusel::Buffer<float>{1, 2}.to(cuda);
      show("    b2 = torch.tensor([1., 2.]).to(device=cuda)", b2);  // cuda:1
      gpusel::Buffer<float> z = x.clone();
      show("    z = x.clone()  (x + y in PyTorch)", z);  // cuda:0: it stays with x
      gpusel::Buffer<float> x0({1, 2}, cuda0);
      show("    torch.tensor([1., 2.], device=cuda0)", x0);  // an explicit index wins: cuda:0
      if (gpus >= 3) {
        gpusel::Buffer<float> d(2, cuda2);
        show("    d = torch.randn(2, device=cuda2)", d);  // cuda:2
        show("    e = torch.randn(2).to(cuda2)", gpusel::Buffer<float>{1, 2}.to(cuda2));
        show("    f = torch.randn(2).cuda(cuda2)", gpusel::Buffer<float>{1, 2}.cuda(2));
      } else {
        std::cout << "    (d, e and f need cuda:2, which this machine does not have)\n";
      }
    }
    show("after the block: torch.tensor(..., device=cuda)", gpusel::Buffer<float>({1, 2}, cuda));  // cuda:0 again
  } catch (const gpusel::Error& error) {
    std::cout << "error: " << error.what() << "\n";
    return 1;
  }
  return 0;
}

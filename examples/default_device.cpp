// A default device for new data:
//
//   torch.set_default_tensor_type('torch.cuda.FloatTensor')    gpusel::set_default_device(gpusel::cuda());
//   x = torch.FloatTensor(6)      # on the GPU                  gpusel::Buffer<float> x(6);
//
// After set_default_device, Buffers made without a device land there; `cuda`
// without an index means the current device of the thread that makes them.
// On a machine with no GPU this example keeps the CPU as the default.
#include <gpusel/gpusel.hpp>

#include <iostream>

int main() try {
  std::cout << "default device at start: " << gpusel::default_device() << "\n";  // cpu, as in PyTorch
  gpusel::Buffer<float> before(6);

  if (gpusel::is_available()) {
    gpusel::set_default_device(gpusel::cuda());  // torch.set_default_tensor_type('torch.cuda.FloatTensor')
  } else {
    std::cout << "no usable GPU (" << gpusel::no_cuda_device_reason().value_or("none visible")
              << "): the default stays cpu\n";
  }
  gpusel::Buffer<float> x(6);  // torch.FloatTensor(6)
  x.fill(1.5f);
  std::cout << "made before: " << before.device() << "; made after: " << x.device() << "; x[0] = " << x.to_vector()[0]
            << "\n";

  gpusel::set_default_device(gpusel::cpu());  // back to the CPU, as torch.set_default_device("cpu")
  return 0;
} catch (const gpusel::Error& error) {
  std::cout << "error: " << error.what() << "\n";
  return 1;
}

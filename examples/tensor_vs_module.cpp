// In C++ as in PyTorch: `tensor.cuda()` returns a NEW tensor with its own
// memory (the original stays where it was), while `module.cuda(device=1)`
// moves the module's buffers IN PLACE and returns the same module. What shows
// it is where the data lives, so this compares data pointers (data_ptr() in
// PyTorch), not the addresses of C++ objects, which always differ.
// It uses device 1 where there is one, else device 0, else the CPU fallback.
#include <gpusel/gpusel.hpp>

#include <iostream>

struct Linear : gpusel::Module {
  gpusel::Buffer<float> weight;
  gpusel::Buffer<float> bias;
  Linear() : weight({0.5f, -0.25f, 1.0f, 2.0f}, gpusel::cpu()), bias({0.1f, 0.2f}, gpusel::cpu()) {
    register_buffer("weight", weight);
    register_buffer("bias", bias);
  }
};

int main() {
  try {
    const int gpus = gpusel::device_count();
    const gpusel::Device device = gpus >= 2 ? gpusel::cuda(1) : gpus == 1 ? gpusel::cuda(0) : gpusel::cpu();
    std::cout << "device: " << device << "\n\n";

    // x = torch.tensor([1., 2., 3.]); y = x.to(device)
    gpusel::Buffer<float> x({1, 2, 3}, gpusel::cpu());
    gpusel::Buffer<float> y = x.to(device);
    std::cout << "tensor: y = x.to(" << device << ")\n"
              << "        x.data() " << x.data() << " on " << x.device() << "\n"
              << "        y.data() " << y.data() << " on " << y.device() << "\n"
              << "        new memory: " << (x.data() != y.data() ? "yes" : "no") << "; x is still on " << x.device()
              << "\n";
    // z = torch.ones(3).to(y.device): put new data where existing data lives.
    gpusel::Buffer<float> z = gpusel::ones<float>(3, gpusel::cpu()).to(y.device());
    std::cout << "        z = ones(3).to(y.device()) is on " << z.device() << "\n\n";

    // model = nn.Linear(2, 2); model.cuda(device=1)
    Linear model;
    const float* weight_before = model.weight.data();
    gpusel::Module& returned = model.to(device);
    std::cout << "module: model.to(" << device << ")\n"
              << "        returned the same module: " << (&returned == &model ? "yes" : "no") << "\n"
              << "        model.weight.data() " << weight_before << " -> " << model.weight.data() << ", now on "
              << model.weight.device() << "\n";
    for (const auto& buffer : model.named_buffers())
      std::cout << "        " << buffer.name << " on " << buffer.device << "\n";
    const bool tensor_is_new = device.is_cpu() || x.data() != y.data();
    return &returned == &model && tensor_is_new && x.device() == gpusel::cpu() && model.device() == device ? 0 : 1;
  } catch (const gpusel::Error& error) {
    std::cout << "error: " << error.what() << "\n";
    return 1;
  }
}

// In C++ as in PyTorch: `tensor.cuda()` returns a NEW object (the
// original stays where it was), `module.cuda()` moves the module IN PLACE and
// returns the same object. Python would print id()s; this prints addresses.
// With no GPU it shows the same thing on the CPU fallback.
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
  const gpusel::Device device = gpusel::preferred_device();  // "cuda:0" if available else "cpu"
  std::cout << "device: " << device << "\n\n";

  // x = torch.tensor([1., 2., 3.]); y = x.cuda()
  gpusel::Buffer<float> x({1, 2, 3}, gpusel::cpu());
  gpusel::Buffer<float> y = x.to(device);
  std::cout << "buffer: x at " << &x << " on " << x.device() << "\n"
            << "        y = x.to(" << device << ") at " << &y << " on " << y.device() << "\n"
            << "        a new object: " << (&x != &y ? "yes" : "no") << "; x is still on " << x.device()
            << "; they share memory: " << (x.data() == y.data() ? "yes" : "no") << "\n\n";

  // model = nn.Linear(2, 2); model2 = model.cuda()
  Linear model;
  gpusel::Buffer<float>& weight = model.weight;
  gpusel::Module& returned = model.to(device);
  std::cout << "module: model at " << &model << "\n"
            << "        model.to(" << device << ") returned " << &returned << "\n"
            << "        the same object: " << (&returned == &model ? "yes" : "no") << "; its weight is now on "
            << weight.device() << "\n";
  for (const auto& buffer : model.named_buffers())
    std::cout << "        " << buffer.name << " on " << buffer.device << "\n";
  return &returned == &model && &x != &y && x.device() == gpusel::cpu() ? 0 : 1;
}

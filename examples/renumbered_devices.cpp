// Restrict the process to physical GPU 1, then use it: after the restriction
// it is cuda:0. A common Python script gets this wrong:
//   os.environ["CUDA_VISIBLE_DEVICES"] = "1"
//   device = torch.device("cuda:1" if torch.cuda.is_available() else "cpu")   # the mistake
//   model = Model().to(device)
// Once CUDA_VISIBLE_DEVICES=1, the process sees one GPU, and it is cuda:0:
// cuda:1 does not exist, and the model never reaches physical GPU 1. The fix is
// to ask for cuda:0 (or the preferred device) after restricting.
#include <gpusel/gpusel.hpp>

#include <iostream>

namespace {

// A small model: two buffers, moved together like nn.Module.to().
struct Model : gpusel::Module {
  gpusel::Buffer<float> weight{0.5f, -1.0f, 2.0f};
  gpusel::Buffer<float> bias{0.1f};
  Model() {
    register_buffer("weight", weight);
    register_buffer("bias", bias);
  }
};

}  // namespace

int main() {
  // os.environ["CUDA_VISIBLE_DEVICES"] = "1", before CUDA starts. gpusel checks
  // the GPU exists when NVML can tell; with no NVML it sets the variable as asked.
  try {
    gpusel::set_visible_devices({1});
  } catch (const gpusel::Error& error) {
    std::cout << "cannot restrict to physical GPU 1 here: " << error.what() << "\n";
  }

  // The mistake, and what gpusel says about it.
  try {
    gpusel::set_device(gpusel::Device::parse("cuda:1"));
  } catch (const gpusel::Error& error) {
    std::cout << "cuda:1 after CUDA_VISIBLE_DEVICES=1: " << error.what() << "\n";
  }
  // The same mistake on a machine with two GPUs, worked out without one:
  const std::vector<std::string> two_gpus = {"GPU-0f000000-0000-4000-8000-000000000000",
                                             "GPU-1f000000-0000-4000-8000-000000000000"};
  try {
    (void)gpusel::parse_visible_devices("1", two_gpus).physical(1);
  } catch (const gpusel::Error& error) {
    std::cout << "on a two-GPU machine: " << error.what() << "\n";
  }

  // Done right: after the restriction, physical GPU 1 is cuda:0, which is
  // what preferred_device() gives ("cuda:0" if available else "cpu").
  const gpusel::Device device = gpusel::preferred_device();
  Model model;
  model.to(device);  // model.to(device): in place, every buffer
  std::cout << "the model runs on " << model.device() << "; weight[2] = " << model.weight.to_vector()[2] << "\n";
  return 0;
}

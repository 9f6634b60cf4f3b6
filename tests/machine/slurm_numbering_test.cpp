// Specification of Slurm's GPU numbers (include/gpusel/machine/slurm_numbering.hpp, Note [Slurm's
// GPU numbers]): gres.conf read as Slurm 22.05 numbers it, and the CUDA_VISIBLE_DEVICES Slurm
// wrote read in those numbers beside CUDA's reading. Pure: each machine and environment is
// written down here; tests/slurm/check_slurm_numbers.sh runs the same under a real Slurm.
#include "gpusel/machine/slurm_numbering.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "pick_machines.hpp"
#include "text_checks.hpp"

namespace {

using gpusel_test::contains;
using gpusel_test::error_from;

using Files = std::vector<std::string>;

// A made-up environment.
gpusel::ReadVariable environment(std::map<std::string, std::string> variables) {
  return [variables = std::move(variables)](const char* name) -> std::optional<std::string> {
    const auto it = variables.find(name);
    if (it == variables.end()) return std::nullopt;
    return it->second;
  };
}

TEST(ParseGresConf, NumbersTheNodesFilesInTheOrderWrittenRangesExpanded) {
  const gpusel::SlurmNumbering typed = gpusel::parse_gres_conf(
      "AutoDetect=off\n# two types\nName=gpu Type=a100 File=/dev/nvidia[0-1]\nName=gpu Type=h100 "
      "File=/dev/nvidia[2-3]  # the H100s\n",
      "node1", "/etc/slurm/gres.conf");
  EXPECT_EQ(typed.device_files, (Files{"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3"}));
  EXPECT_EQ(typed.rule, "by gres.conf's File= lines for node node1, in the order written (/etc/slurm/gres.conf)");
  EXPECT_EQ(
      gpusel::parse_gres_conf("Name=gpu File=/dev/nvidia3\nname=gpu file=/dev/nvidia[0,2-1]\n", "n", "g").device_files,
      (Files{"/dev/nvidia3", "/dev/nvidia0"}))
      << "keys in any case; an empty range adds nothing";
  EXPECT_EQ(gpusel::parse_gres_conf("Name=gpu File=/dev/nvidia[08-10],/dev/nvidia1\n", "n", "g").device_files,
            (Files{"/dev/nvidia08", "/dev/nvidia09", "/dev/nvidia10", "/dev/nvidia1"}));
}

TEST(ParseGresConf, GroupsTypedLinesAsTheNodesGresListsTheTypes) {
  const std::string text = "Name=gpu Type=a100 File=/dev/nvidia[0-1]\nName=gpu Type=h100 File=/dev/nvidia[2-3]\n";
  EXPECT_EQ(gpusel::parse_gres_conf(text, "n", "g", {"h100", "a100"}).device_files,
            (Files{"/dev/nvidia2", "/dev/nvidia3", "/dev/nvidia0", "/dev/nvidia1"}));
  EXPECT_EQ(gpusel::parse_gres_conf(text, "n", "g", {"a100", "h100"}).device_files,
            (Files{"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3"}));
}

TEST(ParseGresConf, KeepsOnlyThisNodesGpuLines) {
  const std::string text =
      "NodeName=n[1-2] Name=gpu File=/dev/nvidia[0-1]\nNodeName=n3 Name=gpu File=/dev/nvidia7\n"
      "Name=mps Count=100\nNodeName=n2,n3 Name=gpu File=/dev/nvidia5\n";
  EXPECT_EQ(gpusel::parse_gres_conf(text, "n2", "g").device_files,
            (Files{"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia5"}));
  EXPECT_EQ(gpusel::parse_gres_conf(text, "n3", "g").device_files, (Files{"/dev/nvidia7", "/dev/nvidia5"}));
}

TEST(ParseGresConf, AutoDetectAndNoFilesNumberByPciBusId) {
  const gpusel::SlurmNumbering detected =
      gpusel::parse_gres_conf("AutoDetect=nvml\nName=gpu File=/dev/nvidia3\n", "n", "/etc/slurm/gres.conf");
  EXPECT_TRUE(detected.device_files.empty());
  EXPECT_EQ(detected.rule, "by PCI bus ID, as Slurm's documentation says of AutoDetect=nvml (/etc/slurm/gres.conf)");
  EXPECT_TRUE(contains(gpusel::parse_gres_conf("Name=gpu Count=4\n", "n", "g").rule, "by PCI bus ID")) << "no File=";
}

// Two A100s (8.0) then two H100s (9.0) in PCI order, each minor its nvidia-smi number.
std::vector<gpusel::Gpu> a100_h100() {
  std::vector<gpusel::Gpu> gpus;
  for (int index = 0; index < 4; ++index) {
    gpus.push_back(gpusel_test::gpu(index, 100, 0, index < 2 ? "NVIDIA A100" : "NVIDIA H100", index < 2 ? 80 : 90));
    gpus.back().minor_number = index;
  }
  return gpus;
}

// A task's variables where Slurm wrote `list` (CUDA_VISIBLE_DEVICES, GPU_DEVICE_ORDINAL, SLURM_STEP_GPUS).
gpusel::ReadVariable slurm_task(const std::string& list) {
  return environment({{"SLURM_JOB_ID", "12"}, {"GPU_DEVICE_ORDINAL", list}, {"SLURM_STEP_GPUS", list}});
}

const gpusel::SlurmNumbering kInOrder{{"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3"}, "in order"};

TEST(SlurmNumbering, ReadsGresConfBesideSlurmConfAndTheNodesGres) {
  char folder[] = "/tmp/gpusel-slurm-conf-XXXXXX";
  ASSERT_NE(mkdtemp(folder), nullptr);
  const std::string conf = std::string(folder) + "/slurm.conf", gres = std::string(folder) + "/gres.conf";
  const auto write = [](const std::string& path, const char* text) {
    std::FILE* file = std::fopen(path.c_str(), "w");
    ASSERT_NE(file, nullptr);
    std::fputs(text, file);
    std::fclose(file);
  };
  write(conf, "ClusterName=c\nNodeName=n1 CPUs=8 Gres=gpu:h100:2,gpu:a100:2 State=UNKNOWN\n");
  write(gres, "AutoDetect=off\nName=gpu Type=a100 File=/dev/nvidia[0-1]\nName=gpu Type=h100 File=/dev/nvidia[2-3]\n");
  const gpusel::SlurmNumbering numbering =
      gpusel::slurm_numbering(environment({{"SLURM_CONF", conf}, {"SLURMD_NODENAME", "n1"}}));
  EXPECT_EQ(numbering.device_files, (Files{"/dev/nvidia2", "/dev/nvidia3", "/dev/nvidia0", "/dev/nvidia1"}));
  EXPECT_EQ(numbering.rule, "by gres.conf's File= lines for node n1, in the order written (" + gres + ")");
  EXPECT_FALSE(numbering.task_local);
  // Under ConstrainDevices Slurm's numbers count inside the task: no list is read in them.
  write(std::string(folder) + "/cgroup.conf", "ConstrainCores=yes\nConstrainDevices=yes\n");
  const gpusel::SlurmNumbering constrained = gpusel::slurm_numbering(environment({{"SLURM_CONF", conf}}));
  EXPECT_TRUE(constrained.task_local);
  const gpusel::DeviceMap map = gpusel_test::machine(a100_h100(), "0");
  EXPECT_FALSE(gpusel::find_slurm_list(map, slurm_task("0"), constrained).from_slurm);
  std::remove((std::string(folder) + "/cgroup.conf").c_str());
  std::remove(conf.c_str());
  std::remove(gres.c_str());
  EXPECT_TRUE(contains(gpusel::slurm_numbering(environment({{"SLURM_CONF", conf}})).rule, "cannot be read"));
  rmdir(folder);
}

TEST(SlurmList, OnANodeOfTwoModelsCudasDefaultOrderIsNotSlurms) {
  // srun --gpus=a100:1: CUDA_VISIBLE_DEVICES=0, the first A100; FASTEST_FIRST counts the H100s first.
  const gpusel::DeviceMap map = gpusel_test::machine(a100_h100(), "0");
  const gpusel::SlurmList list = gpusel::find_slurm_list(map, slurm_task("0"), kInOrder);
  ASSERT_TRUE(list.from_slurm);
  ASSERT_EQ(list.physical.size(), 1u);
  EXPECT_EQ(map.physical_device(list.physical[0])->name, "NVIDIA A100");
  EXPECT_EQ(map.device(0)->name, "NVIDIA H100") << "CUDA's reading, FASTEST_FIRST";
  EXPECT_EQ(list.described,
            "Slurm's 0 (/dev/nvidia0) is GPU-0aaaaaaa-0000-0000-0000-000000000000 (NVIDIA A100, "
            "00000000:17:00.0).\n");
  EXPECT_FALSE(list.agrees());
  EXPECT_TRUE(contains(list.problem,
                       "Slurm wrote CUDA_VISIBLE_DEVICES=0 in its own numbers (in order), which name "
                       "GPU-0aaaaaaa-0000-0000-0000-000000000000 (NVIDIA A100, 00000000:17:00.0), but "
                       "CUDA may read them as other GPUs"))
      << list.problem;
  EXPECT_TRUE(contains(list.problem, "; export CUDA_DEVICE_ORDER=PCI_BUS_ID where the program starts")) << list.problem;
  EXPECT_TRUE(contains(error_from([&] { list.require("gpusel::pick"); }), "gpusel::pick: Slurm wrote"));
  // Read in Slurm's numbers, the map shows the A100 alone.
  const gpusel::DeviceMap resolved = gpusel::in_slurm_numbers(map, list);
  ASSERT_EQ(resolved.visible.count(), 1);
  EXPECT_EQ(resolved.device(0)->uuid, "GPU-0aaaaaaa-0000-0000-0000-000000000000");
  // Under CUDA_DEVICE_ORDER=PCI_BUS_ID the two readings agree.
  const gpusel::DeviceMap pci = gpusel_test::machine(a100_h100(), "0", "PCI_BUS_ID");
  const gpusel::SlurmList same = gpusel::find_slurm_list(pci, slurm_task("0"), kInOrder);
  EXPECT_TRUE(same.from_slurm);
  EXPECT_TRUE(same.agrees()) << same.problem;
  EXPECT_EQ(gpusel::in_slurm_numbers(pci, same).visible.variable(), std::optional<std::string>("0"));
}

TEST(SlurmList, FileLinesOutOfPciOrderAreReadAsSlurmReadsThem) {
  // gres.conf lists /dev/nvidia3 first: Slurm's 0 is the fourth GPU, whatever CUDA_DEVICE_ORDER says.
  const gpusel::SlurmNumbering numbering{{"/dev/nvidia3", "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"}, "r"};
  std::vector<gpusel::Gpu> gpus;
  for (int index = 0; index < 4; ++index) gpus.push_back(gpusel_test::gpu(index, 100, 0));
  for (int index = 0; index < 4; ++index) gpus[static_cast<std::size_t>(index)].minor_number = index;
  for (const char* order : {"FASTEST_FIRST", "PCI_BUS_ID"}) {
    const gpusel::DeviceMap map = gpusel_test::machine(gpus, "0,1", std::string(order));
    const gpusel::SlurmList list = gpusel::find_slurm_list(map, slurm_task("0,1"), numbering);
    EXPECT_EQ(list.physical, (std::vector<int>{3, 0})) << order;
    EXPECT_TRUE(contains(list.problem, "but CUDA reads them as GPU-0aaaaaaa")) << list.problem;
    EXPECT_TRUE(contains(list.problem,
                         "; name Slurm's GPUs by UUID (CUDA_VISIBLE_DEVICES="
                         "GPU-3aaaaaaa-0000-0000-0000-000000000000,GPU-0aaaaaaa-0000-0000-0000-"
                         "000000000000)"))
        << list.problem;
    const gpusel::DeviceMap resolved = gpusel::in_slurm_numbers(map, list);
    ASSERT_EQ(resolved.visible.count(), 2);
    EXPECT_EQ(resolved.visible.physical(0), 3);
    EXPECT_EQ(resolved.visible.physical(1), 0);
  }
}

TEST(SlurmList, OnlyAListSlurmWroteIsReadInItsNumbers) {
  const gpusel::DeviceMap map = gpusel_test::machine(a100_h100(), "2");
  // gpusel run's value inside a step (GPU_DEVICE_ORDINAL is still Slurm's), and outside Slurm.
  EXPECT_FALSE(gpusel::find_slurm_list(map, slurm_task("0"), kInOrder).from_slurm);
  EXPECT_FALSE(gpusel::find_slurm_list(map, environment({{"GPU_DEVICE_ORDINAL", "2"}}), kInOrder).from_slurm);
  const gpusel::DeviceMap uuids = gpusel_test::machine(a100_h100(), "GPU-0aaaaaaa");
  EXPECT_FALSE(gpusel::find_slurm_list(uuids, slurm_task("GPU-0aaaaaaa"), kInOrder).from_slurm);
  EXPECT_TRUE(
      gpusel::find_slurm_list(map, environment({{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_GPUS", "2"}}), kInOrder).from_slurm)
      << "the batch script";
  const gpusel::SlurmList outside = gpusel::find_slurm_list(map, environment({}), kInOrder);
  EXPECT_EQ(gpusel::in_slurm_numbers(map, outside).visible.variable(), std::optional<std::string>("2"));
}

TEST(SlurmList, ANumberNamingNoGpuIsRefusedNeverGuessed) {
  // gres.conf names /dev/nvidia7, which no GPU NVML shows has for its minor number.
  const gpusel::DeviceMap map = gpusel_test::machine(a100_h100(), "0", "PCI_BUS_ID");
  const gpusel::SlurmList list =
      gpusel::find_slurm_list(map, slurm_task("0"), gpusel::SlurmNumbering{{"/dev/nvidia7"}, "r"});
  EXPECT_EQ(list.physical, (std::vector<int>{-1}));
  EXPECT_TRUE(contains(list.problem, "Slurm's 0 in CUDA_VISIBLE_DEVICES=0 names no GPU that NVML shows"))
      << list.problem;
  EXPECT_TRUE(contains(error_from([&] { (void)gpusel::in_slurm_numbers(map, list); }), "names no GPU that NVML shows"));
  // Under the PCI rule, a number beyond the node's GPUs.
  const gpusel::DeviceMap one = gpusel_test::machine(a100_h100(), "5");
  EXPECT_FALSE(gpusel::find_slurm_list(one, slurm_task("5"), gpusel::SlurmNumbering{{}, "by PCI"}).agrees());
}

}  // namespace

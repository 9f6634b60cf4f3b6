// What the fake NVML's two files share (fake_nvml.cpp, the machine; fake_nvml_session.cpp,
// initialization, shutdown and what other tools call): whether NVML is initialized.
#pragma once

namespace fake_nvml {

// Counts a successful nvmlInit_v2 (nvmlInitWithFlags and nvmlInit are the same call).
void count_init();
// Whether an init is not yet undone by an nvmlShutdown: every other call fails with
// NVML_ERROR_UNINITIALIZED otherwise, as NVML's do.
bool initialized();

}  // namespace fake_nvml
